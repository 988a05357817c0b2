package provider

import (
	"context"
	"io"
	"io/fs"
	"time"
)

// Workspace is where a sandbox's writable, persistent files live, as seen
// from inside the sandbox.
const Workspace = "/workspace"

// Provider creates and finds sandboxes of one kind.
type Provider interface {
	// Name is the name the provider is registered under ("linux").
	Name() string
	// Capabilities says what the provider does natively.
	Capabilities() Capabilities
	// Create makes a running sandbox from spec. Creation is idempotent by
	// spec.ID: creating an id that exists returns the existing sandbox,
	// whatever the rest of spec says.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Get returns a handle on an existing sandbox, or an error wrapping
	// errdefs.ErrNotFound.
	Get(ctx context.Context, id string) (Sandbox, error)
	// List describes the sandboxes carrying all of the given labels (all of
	// them when labels is empty), lost ones included.
	List(ctx context.Context, labels map[string]string) ([]Info, error)
}

// Sandbox is a handle on one sandbox. Handles are cheap; two handles on the
// same id drive the same sandbox. All methods are safe for concurrent use.
type Sandbox interface {
	// ID is the sandbox's identifier, unique within its provider.
	ID() string
	// Info describes the sandbox as it is now.
	Info(ctx context.Context) (Info, error)

	// Exec runs a command and waits for it to end, streaming its output to
	// req.Stdout and req.Stderr as it is produced. A request whose ID names
	// a command that already ran or is running attaches to it instead of
	// running it again. When the command timed out or ran out of memory,
	// Exec returns the result together with an error wrapping errdefs.ErrTimeout or
	// errdefs.ErrOutOfMemory; a non-zero exit code alone is not an error.
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)

	// WriteFile creates or replaces one file with the contents of r,
	// creating missing parent directories. Mode zero means 0644; only
	// permission bits are kept. The file is replaced atomically: readers
	// see the old or the new contents, and a symbolic link at path is
	// replaced, never written through.
	WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error
	// WriteFiles writes several small files at once.
	WriteFiles(ctx context.Context, files []File) error
	// ReadFile opens a regular file for reading. The caller closes it.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, error)
	// ListDir lists a directory, sorted by name.
	ListDir(ctx context.Context, path string) ([]FileInfo, error)
	// Remove removes a file or a directory and everything in it, even
	// what the sandbox user made read-only; a symbolic link is removed,
	// not followed. Removing a path that does not exist is not an error.
	Remove(ctx context.Context, path string) error

	// Export writes the whole workspace as a tar stream. The caller closes
	// the reader.
	Export(ctx context.Context) (io.ReadCloser, error)
	// Import unpacks a tar stream into the workspace, over what is there.
	// Regular files, directories, symbolic and hard links are allowed;
	// an archive with any entry that leaves the workspace or is of another
	// type is refused whole, with errdefs.ErrBadInput, and changes nothing.
	Import(ctx context.Context, r io.Reader) error

	// Destroy stops everything in the sandbox and removes all it held.
	// Destroying a sandbox that is already gone is not an error.
	Destroy(ctx context.Context) error
}

// ChangedExporter is implemented by sandboxes that can export only what
// changed: snapshots of a workspace that barely changed then move only
// what did.
type ChangedExporter interface {
	// ExportChanged is Export, except that a regular file whose status
	// (ctime) has not changed since since comes without its content: a
	// header of size 0 with the PAX records PAXUnchanged, set to "1", and
	// PAXSize, its real size.
	ExportChanged(ctx context.Context, since time.Time) (io.ReadCloser, error)
}

// PathExporter is implemented by sandboxes that can export part of their
// workspace.
type PathExporter interface {
	// ExportPath is Export of the file or directory at path alone. Its
	// entries' names start with path's base name, as tar -C would write
	// them: exporting "src/pkg" gives "pkg/", "pkg/a.go"... A path that
	// does not exist is an error wrapping errdefs.ErrNotFound.
	ExportPath(ctx context.Context, path string) (io.ReadCloser, error)
}

// PAX records of ExportChanged.
const (
	PAXUnchanged = "BERTH.unchanged"
	PAXSize      = "BERTH.size"
)

// PAXSkipped marks a regular file that an export leaves out, saying why,
// as a header of size 0: a file whose holes the sandbox's file system
// cannot show (gVisor), too large to read for them. Importers make
// nothing of it; snapshots name it among the paths they left out.
const PAXSkipped = "BERTH.skipped"

// Reporter is implemented by providers that serve, yet may have
// something to say of their state: a part they make in the background
// (the docker provider's default image) still being made, or why it
// could not be. berth providers shows it.
type Reporter interface {
	// Report is one line on what is amiss, or "" when nothing is.
	Report() string
}

// Checker is implemented by providers over a service that can fail
// while the provider is open: a hosted one (E2B, Daytona) whose API may
// be out of reach or refuse the key. berth providers asks it, so that a
// provider whose every call would fail is not shown ready.
type Checker interface {
	// Check makes one cheap call to the service, proving that it answers
	// and accepts the provider's key. Its error wraps
	// errdefs.ErrProviderAuth for a key refused and
	// errdefs.ErrProviderUnavailable for a service that did not answer
	// (or answered 5xx); it is one line and holds no credential.
	Check(ctx context.Context) error
}

// Signaler is implemented by sandboxes that can signal a running
// command: an interrupted caller forwards its Ctrl-C, an operator stops a
// command without stopping the sandbox.
type Signaler interface {
	// Signal sends sig (see ParseSignal) to the command commandID and
	// every process it started that stays in its process group or its
	// session, each once. A command that has ended is not an error: the
	// signal reaches nothing. An id the sandbox never ran is an error
	// wrapping errdefs.ErrBadInput.
	Signal(ctx context.Context, commandID, sig string) error
}

// Pauser is implemented by sandboxes whose provider can freeze them in
// place: no CPU used, memory and processes kept.
type Pauser interface {
	// Pause freezes the sandbox; pausing a paused sandbox does nothing.
	Pause(ctx context.Context) error
	// Resume thaws it; resuming a running sandbox does nothing.
	Resume(ctx context.Context) error
}

// Leaser is implemented by sandboxes that keep a lease (Spec.Lease).
type Leaser interface {
	// Renew is contact and nothing else: it continues a sandbox the lease
	// stopped, never one paused by Pause.
	Renew(ctx context.Context) error
}

// NetworkUpdater is implemented by sandboxes whose network policy can
// change while they run.
type NetworkUpdater interface {
	// UpdateNetwork replaces the sandbox's policy as a whole, at once for
	// new connections; connections open when it changes may stay open.
	// Its errors wrap errdefs.ErrBadInput for a policy that does not
	// validate, and errdefs.ErrUnsupported for one the provider cannot
	// enforce, which leaves the old one.
	UpdateNetwork(ctx context.Context, n Network) error
}

// Hibernator is implemented by sandboxes whose provider can keep their
// whole filesystem (not the workspace alone) at its service, to make a
// new sandbox from it later (Waker.Wake): Modal's suspend. Hibernate
// only keeps; it does not end the sandbox. The caller destroys it once
// it has recorded the Hibernation, so that no crash between the two
// ends a sandbox whose keeping nobody knows of.
type Hibernator interface {
	// Hibernate keeps the sandbox's filesystem, within the provider's
	// own timeout: past it, an error wrapping errdefs.ErrTimeout. id
	// (see ValidateID) names this hibernation: a call with the id of
	// one that was kept (a retry after a lost answer) returns what that
	// one kept, where the service can tell, and keeps nothing more.
	Hibernate(ctx context.Context, id string) (Hibernation, error)
}

// Waker is implemented by providers whose sandboxes are Hibernators.
type Waker interface {
	// Wake makes spec's sandbox, running, from what h kept, its
	// filesystem as it was; the processes are new. It is idempotent by
	// spec.ID, as Create is. What h kept having expired, or gone, is
	// an error wrapping errdefs.ErrNotFound.
	Wake(ctx context.Context, spec Spec, h Hibernation) (Sandbox, error)
	// Discard drops what h kept; what is gone already is no error.
	Discard(ctx context.Context, h Hibernation) error
}

// Hibernation is what a Hibernator kept: plain data, for workflow
// state.
type Hibernation struct {
	// Ref names it at the provider's service (a Modal image's id).
	Ref string `json:"ref"`
	// ExpiresAt is when the service drops it: a wake must start well
	// before.
	ExpiresAt time.Time `json:"expires_at"`
}

// Capabilities says what a provider does natively. What it lacks, callers
// emulate (a sandbox that cannot pause is snapshotted and destroyed).
type Capabilities struct {
	Pause bool `json:"pause"` // sandboxes implement Pauser
	// HostBound sandboxes live on the machine that created them, so every
	// operation must be served by a process on that machine.
	HostBound bool `json:"host_bound"`
	// Limits the provider enforces from Spec.Resources.
	CPU    bool `json:"cpu"`
	Memory bool `json:"memory"`
	Pids   bool `json:"pids"`
	Disk   bool `json:"disk"` // Resources.Disk: the workspace's bytes and files
	// Network: a sandbox can have NetworkOpen. NetworkAllow: the
	// provider enforces NetworkAllow's rules (see Network).
	Network      bool `json:"network"`
	NetworkAllow bool `json:"network_allow,omitempty"`
	// NetworkCredentials: the provider's host adds credentials it holds
	// to sandboxes' requests to the hosts they name (over HTTPS too,
	// its sandboxes trusting the proxy's authority), and no sandbox
	// sees one.
	NetworkCredentials bool `json:"network_credentials,omitempty"`
	// RootFS: Spec.RootFS is honoured; Image: Spec.Image is.
	RootFS bool `json:"rootfs"`
	Image  bool `json:"image"`
	// MaxLifetime is the longest the provider's service keeps one
	// sandbox, whatever its spec asks (a hosted service's hard session
	// limit); zero means no such limit. The sandbox handle carries the
	// workspace to a new sandbox before it, so a sandbox outlives it.
	MaxLifetime time.Duration `json:"max_lifetime,omitempty"`
	// Hibernate: sandboxes implement Hibernator and the provider Waker.
	Hibernate bool `json:"hibernate,omitempty"`
}

// Spec describes a sandbox to create. The zero value is a usable
// sandbox: the provider's default root filesystem, no network, the
// provider's default limits and lifetime, an id of the provider's choice.
//
// A provider refuses, with errdefs.ErrUnsupported, what it cannot honour (a limit
// it cannot enforce, an image when it has none) rather than ignore it.
type Spec struct {
	// ID names the sandbox; see ValidateID. Empty means the provider picks
	// one, and creation is then not idempotent.
	ID string `json:"id,omitempty"`
	// RootFS is a directory on the provider's host holding a root
	// filesystem, mounted read-only. Empty means the provider's default.
	RootFS string `json:"rootfs,omitempty"`
	// Image names an image, for providers that have images.
	Image string `json:"image,omitempty"`
	// Env is added to the environment of every command.
	Env map[string]string `json:"env,omitempty"`
	// Dir is the default working directory of commands, a workspace path.
	Dir       string    `json:"dir,omitempty"`
	Resources Resources `json:"resources,omitzero"`
	Network   Network   `json:"network,omitzero"`
	// Labels are kept with the sandbox and matched by List. Berth uses them
	// to name the workflow that owns a sandbox.
	Labels map[string]string `json:"labels,omitempty"`
	// Lifetime is a hard limit: when it has passed the provider stops the
	// sandbox whatever it is doing. Zero means DefaultLifetime.
	Lifetime time.Duration `json:"lifetime,omitempty"`
	// Lease, on a provider whose sandboxes implement Leaser, ties the
	// sandbox to a host that holds it: when no call has reached the
	// sandbox (Leaser.Renew, or any operation) for this long, it stops
	// every process of its workload, as Pause does, and the next call
	// continues them. Zero means no lease; otherwise at least MinLease.
	Lease time.Duration `json:"lease,omitempty"`
}

// DefaultLifetime is the hard lifetime of a sandbox whose spec names none.
const DefaultLifetime = 24 * time.Hour

// MinLease is the shortest lease a spec may ask for.
const MinLease = time.Second

// Resources limits what a sandbox may use. Zero means the provider's
// default for each field.
type Resources struct {
	CPU    float64 `json:"cpu,omitempty"`    // cores, e.g. 0.5
	Memory int64   `json:"memory,omitempty"` // bytes, including page cache
	Pids   int64   `json:"pids,omitempty"`   // processes and threads
	// Disk bounds the workspace: its bytes, and the number of its files
	// and directories, to no more than one per KiB of Disk (the linux
	// provider: one per 16 KiB). Past either bound, writing or creating
	// in the workspace fails inside the sandbox (ENOSPC, or EDQUOT where
	// a provider uses quotas), and nothing outside it is affected.
	Disk int64 `json:"disk,omitempty"`
}

// State is where a sandbox is in its lifecycle.
type State string

const (
	StateRunning State = "running"
	StatePaused  State = "paused"
	// StateLost means the sandbox exists in the provider's records but its
	// processes are gone; only Destroy is useful.
	StateLost State = "lost"
)

// Info describes a sandbox.
type Info struct {
	ID        string            `json:"id"`
	Provider  string            `json:"provider"`
	State     State             `json:"state"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	// ExpiresAt is when the sandbox's hard lifetime ends.
	ExpiresAt time.Time `json:"expires_at"`
	// Lease is the spec's: a host that holds the sandbox renews it well
	// within this.
	Lease     time.Duration `json:"lease,omitempty"`
	Resources Resources     `json:"resources,omitzero"`
}

// ExecRequest is a command to run. Exactly one of Argv and Shell is set.
type ExecRequest struct {
	// ID identifies the command for exactly-once execution: a second
	// request with the same ID attaches to the first, whatever else it
	// says. Empty means a fresh id, returned in ExecResult.ID; see
	// ValidateID for the allowed form.
	ID string
	// Argv is the program and its arguments. A program name without a
	// slash is looked up in the sandbox's PATH.
	Argv []string
	// Shell is a command line run with /bin/sh -c.
	Shell string
	// Stdin, if not nil, is copied to the command's standard input, which
	// is closed at its end. Nil means an empty input.
	Stdin io.Reader
	// Env is added to the sandbox's environment for this command.
	Env map[string]string
	// Dir is the working directory, a workspace path. Empty means the
	// sandbox's default. A directory that does not exist is an error
	// wrapping fs.ErrNotExist.
	Dir string
	// Timeout ends the command, and every process it started, when it has
	// run this long. Zero means no limit beyond the sandbox's lifetime.
	// Processes a command leaves running in the background when it ends
	// normally are not its to kill: they keep running.
	Timeout time.Duration
	// Stdout and Stderr receive the output as it is produced. Nil discards.
	Stdout, Stderr io.Writer
	// TTY, if not nil, runs the command on a terminal of this size, its
	// controlling terminal and its stdin, stdout and stderr: what it
	// writes comes as Stdout alone, and its input comes through the
	// sandbox's Terminal, not Stdin (which must be nil). A provider
	// whose sandboxes are not Terminals refuses it with errdefs.ErrUnsupported.
	TTY *TerminalSize
	// StdoutOffset and StderrOffset skip that many bytes of each stream,
	// so that a caller re-attaching after a crash receives only what it has
	// not seen. An offset past the end yields nothing.
	StdoutOffset, StderrOffset int64
}

// TerminalSize is a terminal's size in characters. Zero fields mean
// DefaultTerminalSize's.
type TerminalSize struct {
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// DefaultTerminalSize is the size of a terminal whose request names none.
var DefaultTerminalSize = TerminalSize{Rows: 24, Cols: 80}

// Terminal is implemented by sandboxes that can run a command on a
// terminal (ExecRequest.TTY). Both methods address the command by its
// ExecRequest.ID while it runs; a command that has ended, or that has no
// terminal, is an error wrapping errdefs.ErrNotFound.
type Terminal interface {
	// TerminalInput writes data to the command's terminal, as if typed:
	// the terminal's line discipline sees it, so that ^C (0x03) interrupts
	// the command and ^D (0x04) ends a line of input.
	TerminalInput(ctx context.Context, id string, data []byte) error
	// ResizeTerminal changes the size of the command's terminal; its
	// foreground processes get SIGWINCH.
	ResizeTerminal(ctx context.Context, id string, size TerminalSize) error
}

// ExecResult is what became of a command.
type ExecResult struct {
	ID string `json:"id"`
	// ExitCode is the command's exit status, or -1 when it was ended by a
	// signal (Signal then names it).
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	// OOMKilled: the sandbox hit its memory limit and the kernel killed
	// the command.
	OOMKilled bool `json:"oom_killed,omitempty"`
	// StdoutBytes and StderrBytes count everything the command wrote.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// Truncated: part of the output could not be delivered because the
	// caller was away while the command wrote more than the provider keeps.
	Truncated bool          `json:"truncated,omitempty"`
	StartedAt time.Time     `json:"started_at"`
	Duration  time.Duration `json:"duration"`
	// Attached: this call attached to a command started by an earlier call.
	Attached bool `json:"attached,omitempty"`
}

// File is a small file for WriteFiles.
type File struct {
	Path string      `json:"path"`
	Data []byte      `json:"data"`           // base64 in JSON
	Mode fs.FileMode `json:"mode,omitempty"` // permission bits; zero means 0644
}

// FileInfo describes a directory entry.
type FileInfo struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"mod_time"`
	// Target is where a symbolic link points.
	Target string `json:"target,omitempty"`
}

// IsDir reports whether the entry is a directory.
func (fi FileInfo) IsDir() bool { return fi.Mode.IsDir() }
