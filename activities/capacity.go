package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// Capacity bounds what a host holds of its host-bound providers'
// sandboxes (linux, docker, gvisor: those that take the host's memory):
// how many, the sum of their memory limits, and the free disk it keeps. A creation that would
// pass either bound is refused with an error wrapping errdefs.ErrQuota,
// at once, and its workflow places it on another host (see package
// sandbox, placement). Sandboxes of hosted providers are not counted: they
// take nothing of the host's.
//
// A Capacity is shared by the host's workers and safe for concurrent
// use. Its count is the sandboxes the providers list (Sync) and the
// creations admitted since, until they end.
type Capacity struct {
	// MaxSandboxes bounds the sandboxes held; zero means no bound.
	MaxSandboxes int
	// MaxMemory bounds the sum of their memory limits, in bytes; zero
	// means no bound.
	MaxMemory int64
	// SandboxMemory is what a sandbox that asks for no memory limit is
	// counted for until its provider lists it with the limit it got;
	// zero means DefaultSandboxMemory.
	SandboxMemory int64
	// DiskDir is a directory on the file system the sandboxes' files
	// take (the host's data directory), and MinFreeDisk the bytes that
	// must be free there for a new sandbox: a host whose disk fills
	// takes no more. Zero means DefaultMinFreeDisk of the file
	// system's size, a negative value no bound; no DiskDir, no bound.
	DiskDir     string
	MinFreeDisk int64

	mu       sync.Mutex
	held     map[string]heldSandbox // by provider/id
	creating map[string]int64       // admitted, not yet made or failed: memory limit by provider/id
	draining bool
}

type heldSandbox struct {
	memory int64
	since  time.Time // counted since; a list taken before does not drop it
}

// DefaultSandboxMemory is the memory limit the self-hosted providers
// give a sandbox that asks for none (2 GiB): what such a creation is
// counted for.
const DefaultSandboxMemory = 2 << 30

// DefaultMinFreeDisk is the free disk a host keeps by default on a file
// system of size bytes: a twentieth, at least 1 GiB, but never more than
// a tenth (a small disk is not refused whole).
func DefaultMinFreeDisk(size int64) int64 {
	return min(max(1<<30, size/20), size/10)
}

// Load is what a host holds, against its bounds: its answer to
// placement (the Load activity).
type Load struct {
	Host         string `json:"host"` // the host's queue
	Sandboxes    int    `json:"sandboxes"`
	Memory       int64  `json:"memory"`
	MaxSandboxes int    `json:"max_sandboxes,omitempty"`
	MaxMemory    int64  `json:"max_memory,omitempty"`
	// Draining says the host is stopping: it takes no new sandbox.
	Draining bool `json:"draining,omitempty"`
	// FreeDisk is what is free on the host's disk, and MinFreeDisk what
	// must be for a new sandbox (--min-free-disk); both zero when the
	// host does not bound it.
	FreeDisk    int64 `json:"free_disk,omitempty"`
	MinFreeDisk int64 `json:"min_free_disk,omitempty"`
	// Serves says the host serves the provider asked about, and Counted
	// that its sandboxes count against these bounds (a host-bound one).
	Serves  bool `json:"serves"`
	Counted bool `json:"counted,omitempty"`
	// Fits says a sandbox of the memory asked fits now.
	Fits bool `json:"fits"`
}

// Share is the larger of the shares of the host's bounds in use, from 0
// to 1 (0 when it has no bound): what least-loaded placement compares.
func (l Load) Share() float64 {
	var s float64
	if l.MaxSandboxes > 0 {
		s = float64(l.Sandboxes) / float64(l.MaxSandboxes)
	}
	if l.MaxMemory > 0 {
		s = max(s, float64(l.Memory)/float64(l.MaxMemory))
	}
	return s
}

func (c *Capacity) memoryOf(asked int64) int64 {
	switch {
	case asked > 0:
		return asked
	case c.SandboxMemory > 0:
		return c.SandboxMemory
	}
	return DefaultSandboxMemory
}

// fits says whether a sandbox of memory mem fits, beside what is held
// and being made, and the host's disk has room. Call with c.mu held.
func (c *Capacity) fits(mem int64) bool {
	if c.draining {
		return false
	}
	if free, least, ok := c.disk(); ok && free < least {
		return false
	}
	n, used := len(c.held)+len(c.creating), int64(0)
	for _, h := range c.held {
		used += h.memory
	}
	for _, m := range c.creating {
		used += m
	}
	return (c.MaxSandboxes <= 0 || n < c.MaxSandboxes) && (c.MaxMemory <= 0 || used+mem <= c.MaxMemory)
}

// Seen is the load placement read on a host before choosing it for a
// creation. A creation that carries it is admitted only if the host
// holds no more now: when another creation took the host since it was
// asked, this one is refused (IsHostChanged) and placed again, reading
// the loads anew. So creations placed at the same moment see each
// other: each is admitted only on a host that was still least loaded
// when admitting it, and a burst over equal hosts lands evenly (a
// difference of at most one between any two of them).
type Seen struct {
	Sandboxes int   `json:"sandboxes"`
	Memory    int64 `json:"memory"`
}

// changedError refuses a creation whose host took others since
// placement read its load.
type changedError struct{ now, seen Seen }

func (e *changedError) Error() string {
	return fmt.Sprintf("it holds %d sandboxes with %d MiB of memory limits, %d and %d MiB when asked",
		e.now.Sandboxes, e.now.Memory>>20, e.seen.Sandboxes, e.seen.Memory>>20)
}

// admit counts the creation of sandbox key, of memory limit asked (zero:
// the provider's default), or refuses it; done ends it, made saying
// whether the sandbox now exists. A retry of a creation already counted
// is admitted again. With seen, a creation is refused when the host
// holds more than seen (see Seen).
func (c *Capacity) admit(key string, asked int64, seen *Seen) (done func(made bool), err error) {
	if c == nil {
		return func(bool) {}, nil
	}
	mem := c.memoryOf(asked)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	_, held := c.held[key]
	_, creating := c.creating[key]
	if !held && !creating {
		if !c.fits(mem) {
			return nil, c.fullError(mem)
		}
		if l := c.loadLocked(); seen != nil && (l.Sandboxes > seen.Sandboxes || l.Memory > seen.Memory) {
			return nil, &changedError{now: Seen{l.Sandboxes, l.Memory}, seen: *seen}
		}
		c.creating[key] = mem
	}
	return func(made bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if m, ok := c.creating[key]; ok {
			delete(c.creating, key)
			if made {
				c.held[key] = heldSandbox{memory: m, since: time.Now()}
			}
		}
	}, nil
}

// fullError says why a sandbox of memory mem does not fit. Call with
// c.mu held.
func (c *Capacity) fullError(mem int64) error {
	if c.draining {
		return errors.New("it is stopping, and takes no new sandbox")
	}
	if free, least, ok := c.disk(); ok && free < least {
		return fmt.Errorf("its disk (%s) has %d MiB free, less than the %d MiB it keeps free (--min-free-disk)", c.DiskDir, free>>20, least>>20)
	}
	l := c.loadLocked()
	return fmt.Errorf("it holds %d sandboxes (at most %d) with %d MiB of memory limits (at most %d MiB); %d MiB asked",
		l.Sandboxes, c.MaxSandboxes, l.Memory>>20, c.MaxMemory>>20, mem>>20)
}

// hostFull starts the message of a creation a host refused for want of
// room (an error of kind Quota): placement tries again, on another host
// if one has room (see IsHostFull).
const hostFull = "no room on host "

// IsHostFull says whether err, an activity's error back in workflow
// code, is a host's refusal of a creation for want of room: not the
// creation's fault, and another host, or the same later, may take it.
func IsHostFull(err error) bool {
	return errors.Is(err, errdefs.ErrQuota) && strings.Contains(err.Error(), hostFull)
}

// hostChanged starts the message of a creation a host refused because
// it took other sandboxes since placement read its load (an error of
// kind Quota): placement reads the loads again at once (see
// IsHostChanged).
const hostChanged = "load changed on host "

// IsHostChanged says whether err, an activity's error back in workflow
// code, is a host's refusal of a creation placed on a load it no longer
// has (see Seen).
func IsHostChanged(err error) bool {
	return errors.Is(err, errdefs.ErrQuota) && strings.Contains(err.Error(), hostChanged)
}

// forget stops counting sandbox key: it was destroyed.
func (c *Capacity) forget(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, key)
}

func (c *Capacity) init() {
	if c.held == nil {
		c.held, c.creating = map[string]heldSandbox{}, map[string]int64{}
	}
}

// Sync replaces the count of what provider name holds by infos, what it
// listed at listed: sandboxes made since stay counted.
func (c *Capacity) Sync(name string, infos []provider.Info, listed time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	prefix := name + "/"
	for key, h := range c.held {
		if strings.HasPrefix(key, prefix) && h.since.Before(listed) {
			delete(c.held, key)
		}
	}
	for _, info := range infos {
		if _, ok := c.creating[prefix+info.ID]; ok || info.State == provider.StateLost {
			continue // counted as it is made; or its processes are gone, and it takes no memory
		}
		c.held[prefix+info.ID] = heldSandbox{memory: c.memoryOf(info.Resources.Memory), since: listed}
	}
}

// Drain refuses every creation from now on: the host is stopping.
func (c *Capacity) Drain() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.draining = true
}

// Load says what the host holds now, and whether a sandbox of memory
// limit asked (zero: the provider's default) fits.
func (c *Capacity) Load(asked int64) Load {
	if c == nil {
		return Load{Fits: true}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.loadLocked()
	l.Fits = c.fits(c.memoryOf(asked))
	return l
}

func (c *Capacity) loadLocked() Load {
	l := Load{Sandboxes: len(c.held) + len(c.creating), MaxSandboxes: c.MaxSandboxes, MaxMemory: c.MaxMemory, Draining: c.draining}
	if free, least, ok := c.disk(); ok {
		l.FreeDisk, l.MinFreeDisk = free, least
	}
	for _, h := range c.held {
		l.Memory += h.memory
	}
	for _, m := range c.creating {
		l.Memory += m
	}
	return l
}

// LoadInput asks a host for its load, for a sandbox of Provider with
// the given memory limit (zero: the provider's default).
type LoadInput struct {
	Provider string `json:"provider"`
	Memory   int64  `json:"memory,omitempty"`
}

// Load, run on a host's queue, says what the host holds and whether a
// sandbox of in.Provider of in.Memory fits there now: placement asks
// every host that serves the provider, and creates the sandbox on the
// least loaded one it fits on.
func (a *Activities) Load(ctx context.Context, in LoadInput) (Load, error) {
	p, ok := a.Providers[in.Provider]
	var l Load
	switch {
	case !ok:
	case !p.Capabilities().HostBound:
		l = Load{Serves: true, Fits: true}
	default:
		l = a.Capacity.Load(in.Memory)
		l.Serves, l.Counted = true, a.Capacity != nil
	}
	l.Host = a.HostQueue
	return l, nil
}

// admit counts a creation of a host-bound provider's sandbox against
// the host's capacity, and the load placement saw, if given.
func (a *Activities) admit(p provider.Provider, spec provider.Spec, seen *Seen) (func(bool), error) {
	if !p.Capabilities().HostBound {
		return func(bool) {}, nil
	}
	done, err := a.Capacity.admit(p.Name()+"/"+spec.ID, spec.Resources.Memory, seen)
	var changed *changedError
	switch {
	case errors.As(err, &changed):
		return nil, errdefs.Errorf(errdefs.Quota, "%s%s: %v", hostChanged, a.HostQueue, err)
	case err != nil:
		return nil, errdefs.Errorf(errdefs.Quota, "%s%s: %v", hostFull, a.HostQueue, err)
	}
	return done, nil
}
