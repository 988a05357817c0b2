package remotefake

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/remote"
)

// Bounds of what API's callers give it.
const (
	maxName      = 128
	maxLabels    = 64
	maxLabelText = 256
)

// API is a hosted service straight over a Farm, with no HTTP between: its
// machines have no time limit and it cannot pause them (it is not a
// [remote.Pauser]), so berth's daemon pauses their processes. It serves
// the generic remote provider's tests.
type API struct {
	farm *Farm

	mu     sync.Mutex
	byName map[string]*apiMachine
}

// apiMachine is what API keeps of one machine.
type apiMachine struct {
	ready  chan struct{} // closed when m or err is set
	m      *Machine
	err    error
	name   string
	labels map[string]string
	at     time.Time
}

var _ remote.API = (*API)(nil)

// NewAPI serves f's machines as a hosted service.
func NewAPI(f *Farm) *API {
	return &API{farm: f, byName: map[string]*apiMachine{}}
}

// Name is "remotefake".
func (a *API) Name() string { return "remotefake" }

// Create makes a machine named req.Name, or returns the one made under
// the name. The service has one image, the farm's: req.Image is empty or
// names it. Sizes and the lifetime are taken and not enforced.
func (a *API) Create(ctx context.Context, req remote.CreateRequest) (remote.Machine, error) {
	if err := checkName(req.Name); err != nil {
		return remote.Machine{}, err
	}
	if err := checkLabels(req.Labels); err != nil {
		return remote.Machine{}, err
	}
	if req.Image != "" && req.Image != a.farm.image {
		return remote.Machine{}, fmt.Errorf("%w: remotefake: no image %q", errdefs.ErrBadInput, clip(req.Image))
	}
	for {
		a.mu.Lock()
		e := a.byName[req.Name]
		if e == nil {
			e = &apiMachine{ready: make(chan struct{}), name: req.Name, labels: maps.Clone(req.Labels), at: time.Now()}
			a.byName[req.Name] = e
			a.mu.Unlock()
			e.m, e.err = a.farm.Create(ctx, "m-"+randomHex(8), nil)
			if e.err != nil {
				a.mu.Lock()
				delete(a.byName, req.Name)
				a.mu.Unlock()
			}
			close(e.ready)
			if e.err != nil {
				return remote.Machine{}, e.err
			}
			return a.describe(e), nil
		}
		a.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return remote.Machine{}, fmt.Errorf("%w: remotefake: create %q: %v", errdefs.ErrCanceled, req.Name, ctx.Err())
		}
		if e.err != nil {
			continue // the first Create failed: try again
		}
		if _, err := a.farm.Machine(e.m.ID()); err != nil {
			// Destroyed behind the service's back: gone.
			a.drop(e)
			continue
		}
		return a.describe(e), nil
	}
}

// Find returns the machine named name.
func (a *API) Find(ctx context.Context, name string) (remote.Machine, error) {
	for _, e := range a.live() {
		if e.name == name {
			return a.describe(e), nil
		}
	}
	return remote.Machine{}, fmt.Errorf("%w: remotefake: no machine named %q", errdefs.ErrNotFound, clip(name))
}

// List lists the machines that carry all of labels, oldest first.
func (a *API) List(ctx context.Context, labels map[string]string) ([]remote.Machine, error) {
	var ms []remote.Machine
outer:
	for _, e := range a.live() {
		for k, v := range labels {
			if w, ok := e.labels[k]; !ok || w != v {
				continue outer
			}
		}
		ms = append(ms, a.describe(e))
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].CreatedAt.Before(ms[j].CreatedAt) })
	return ms, nil
}

// Delete destroys the machine; one that is gone is not an error.
func (a *API) Delete(ctx context.Context, rm remote.Machine) error {
	m, err := a.farm.Machine(rm.ID)
	if err == nil {
		if err := m.Destroy(ctx); err != nil {
			return err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, e := range a.byName {
		if e.m != nil && e.m.ID() == rm.ID {
			delete(a.byName, name)
		}
	}
	return nil
}

// Upload writes r to path in the machine, mode 0755.
func (a *API) Upload(ctx context.Context, rm remote.Machine, path string, r io.Reader) error {
	m, err := a.farm.Machine(rm.ID)
	if err != nil {
		return err
	}
	return m.WriteFile(ctx, path, r, 0o755)
}

// Start starts argv in the machine as root, detached: its output is
// read and dropped, and it runs until it exits or the machine ends.
func (a *API) Start(ctx context.Context, rm remote.Machine, argv []string, env map[string]string) error {
	m, err := a.farm.Machine(rm.ID)
	if err != nil {
		return err
	}
	p, err := m.Start(ctx, Command{Argv: argv, Env: env})
	if err != nil {
		return err
	}
	go io.Copy(io.Discard, p.Stdout())
	go io.Copy(io.Discard, p.Stderr())
	return nil
}

// Endpoint reaches port of the machine: the URL's host is the machine's
// id, and the Transport dials the port in the machine's namespace.
func (a *API) Endpoint(ctx context.Context, rm remote.Machine, port int) (remote.Endpoint, error) {
	if _, err := a.farm.Machine(rm.ID); err != nil {
		return remote.Endpoint{}, err
	}
	if port <= 0 || port > 65535 {
		return remote.Endpoint{}, fmt.Errorf("%w: remotefake: port %d", errdefs.ErrBadInput, port)
	}
	id := rm.ID
	return remote.Endpoint{
		URL: "http://" + id,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				m, err := a.farm.Machine(id)
				if err != nil {
					return nil, err
				}
				return m.Dial(ctx, port)
			},
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     30 * time.Second,
		},
	}, nil
}

// KeepAlive does nothing: the service's machines have no time limit.
func (a *API) KeepAlive(ctx context.Context, rm remote.Machine, d time.Duration) error {
	_, err := a.farm.Machine(rm.ID)
	return err
}

// live lists the machines made and not destroyed.
func (a *API) live() []*apiMachine {
	a.mu.Lock()
	es := make([]*apiMachine, 0, len(a.byName))
	for _, e := range a.byName {
		es = append(es, e)
	}
	a.mu.Unlock()
	var out []*apiMachine
	for _, e := range es {
		select {
		case <-e.ready:
		default:
			continue // being made
		}
		if e.err != nil {
			continue
		}
		if _, err := a.farm.Machine(e.m.ID()); err != nil {
			a.drop(e)
			continue
		}
		out = append(out, e)
	}
	return out
}

// drop forgets a machine that is gone.
func (a *API) drop(e *apiMachine) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byName[e.name] == e {
		delete(a.byName, e.name)
	}
}

func (a *API) describe(e *apiMachine) remote.Machine {
	state := remote.MachineRunning
	if e.m.Paused() {
		state = remote.MachinePaused
	}
	return remote.Machine{ID: e.m.ID(), Name: e.name, Labels: maps.Clone(e.labels), State: state, CreatedAt: e.at}
}

func checkName(name string) error {
	if name == "" || len(name) > maxName {
		return fmt.Errorf("%w: remotefake: a machine's name must have 1 to %d bytes", errdefs.ErrBadInput, maxName)
	}
	return nil
}

func checkLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return fmt.Errorf("%w: remotefake: more than %d labels", errdefs.ErrBadInput, maxLabels)
	}
	for k, v := range labels {
		if k == "" || len(k) > maxLabelText || len(v) > maxLabelText {
			return fmt.Errorf("%w: remotefake: a label's key must have 1 to %d bytes, its value at most %d", errdefs.ErrBadInput, maxLabelText, maxLabelText)
		}
	}
	return nil
}
