package remote

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/berth-dev/berth/provider"
)

// API is what a hosted service offers for its machines, as a provider
// package adapts it. Its methods are safe for concurrent use, and their
// errors carry berth's kinds (package errdefs), in one line, with no
// credential in them: ErrNotFound for a machine that is not there,
// ErrBadInput for what the service refuses as such,
// ErrProviderUnavailable (retryable) for rate limits, 5xx answers and
// dropped connections, ErrProviderAuth for a missing or refused key, and
// ErrQuota for the account's limits.
type API interface {
	// Name is the provider's name ("e2b").
	Name() string
	// Create makes a running machine, or returns the one an earlier
	// Create made under req.Name (a retry after a lost answer): it never
	// makes two machines with one name.
	Create(ctx context.Context, req CreateRequest) (Machine, error)
	// Find returns the machine named name, or an error wrapping
	// errdefs.ErrNotFound.
	Find(ctx context.Context, name string) (Machine, error)
	// List lists the machines that carry all of labels.
	List(ctx context.Context, labels map[string]string) ([]Machine, error)
	// Delete ends the machine and everything it holds; one that is gone
	// already is not an error.
	Delete(ctx context.Context, m Machine) error
	// Upload writes r to path in the machine as a file of mode 0755,
	// creating its parent directories.
	Upload(ctx context.Context, m Machine, path string, r io.Reader) error
	// Start starts argv in the machine, with env added to its
	// environment, detached: it runs on after the call and its
	// connection end, until it exits or the machine ends.
	Start(ctx context.Context, m Machine, argv []string, env map[string]string) error
	// Endpoint says how to reach a TCP port of the machine over HTTP.
	Endpoint(ctx context.Context, m Machine, port int) (Endpoint, error)
	// KeepAlive makes the service keep the machine for at least d from
	// now. A service whose machines have no time limit of their own does
	// nothing.
	KeepAlive(ctx context.Context, m Machine, d time.Duration) error
}

// Pauser is implemented by an API whose service can pause a machine
// with its memory, and resume it: berth's Pause then uses it, and a
// paused machine costs nothing to run. An API that does not implement it
// leaves Pause to the daemon (SIGSTOP of every process but itself), and
// the machine runs on.
type Pauser interface {
	Pause(ctx context.Context, m Machine) error
	Resume(ctx context.Context, m Machine) error
}

// Checker is implemented by an API that can prove, in one cheap call,
// that its service answers and accepts its key: the provider New makes
// is then a provider.Checker, so berth providers tells a service out of
// reach, or a key refused, from one ready. Its errors are classified as
// API's are.
type Checker interface {
	Check(ctx context.Context) error
}

// CreateRequest describes a machine to make.
type CreateRequest struct {
	// Name is unique among the account's machines; it derives from the
	// sandbox id.
	Name string
	// Labels are kept with the machine and matched by List.
	Labels map[string]string
	// Image is the service's template, snapshot or image to start from;
	// empty means the provider's default.
	Image string
	// Snapshot, when set, is a Snapshotter's snapshot to start from
	// instead of Image: the machine's filesystem is the snapshotted one.
	Snapshot string
	// CPU (cores), Memory (bytes) and Disk (bytes) are the machine's
	// size; zero means the service's default. A service that sizes
	// machines by template refuses them with errdefs.ErrUnsupported.
	CPU    float64
	Memory int64
	Disk   int64
	// Lifetime is how long the service keeps the machine unless
	// KeepAlive says otherwise.
	Lifetime time.Duration
	// Network is the machine's egress policy, one its API's
	// NetworkSupport holds; an API that is no NetworkPolicer is only
	// ever given NetworkNone, and may leave the machine its service's
	// network.
	Network provider.Network
}

// Machine is one machine as the service describes it.
type Machine struct {
	// ID is the service's id for it; Name is berth's (CreateRequest.Name).
	ID, Name  string
	Labels    map[string]string
	State     MachineState
	CreatedAt time.Time
	// ExpiresAt is when the service ends it, unless kept alive; zero
	// when it has no time limit.
	ExpiresAt time.Time
}

// MachineState is what the service says of a machine.
type MachineState string

const (
	MachineRunning MachineState = "running"
	MachinePaused  MachineState = "paused"  // by the service, with its memory
	MachineStopped MachineState = "stopped" // its disk kept, its memory not
	MachineFailed  MachineState = "failed"  // the service gave up on it
)

// Endpoint is how to reach one port of a machine over HTTP.
type Endpoint struct {
	// URL is the base URL that requests' paths are added to
	// ("https://49999-i7x.e2b.app").
	URL string
	// Header is sent with every request (the service's routing and
	// access tokens).
	Header http.Header
	// Transport carries the requests; nil means a transport of the
	// provider's own.
	Transport http.RoundTripper
}
