package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/image"
	"github.com/berth-dev/berth/provider/internal/clients"
	"github.com/berth-dev/berth/provider/internal/hostproc"
	"github.com/berth-dev/berth/provider/internal/idlock"
	"github.com/berth-dev/berth/provider/internal/netns"
	"github.com/berth-dev/berth/provider/internal/records"
	"github.com/berth-dev/berth/provider/internal/sandboxspec"
	"github.com/berth-dev/berth/provider/internal/settings"
	"github.com/berth-dev/berth/provider/internal/warmpool"
	"github.com/berth-dev/berth/sandboxd"
)

// Name is the provider's registered name.
const Name = "gvisor"

// Provider makes sandboxes that are runsc containers on this host.
type Provider struct {
	cfg      Config
	log      *slog.Logger
	pool     *warmpool.Pool[*container]
	cleanups sync.WaitGroup // removals of destroyed sandboxes' containers

	images *image.Cache   // root filesystems of Spec.Image
	net    *netns.Manager // nil without Config.Network

	clients clients.Cache
}

var _ provider.Provider = (*Provider)(nil)

// New opens the provider on cfg.StateDir, creating it if needed.
func New(cfg Config) (*Provider, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the gvisor provider must run as root (it mounts workspace images and makes cgroups)", errdefs.ErrUnsupported)
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("gvisor provider: %w", err)
	}
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, runscDir), filepath.Join(cfg.StateDir, containersDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor provider: %w", err)
		}
	}
	if err := idlock.Create(filepath.Join(cfg.StateDir, lockFile)); err != nil {
		return nil, fmt.Errorf("gvisor provider: %w", err)
	}
	// gVisor's root is the host's root: an image's owners are kept as
	// they are, unshifted (a cache of its own, apart from linux's).
	images, err := image.Open(cfg.ImageDir, image.WithLogger(cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("gvisor provider: %w", err)
	}
	p := &Provider{cfg: cfg, log: cfg.Logger, images: images}
	if cfg.Network.Enabled() {
		if err := p.openNetwork(); err != nil {
			images.Close()
			return nil, fmt.Errorf("gvisor provider: %w", err)
		}
	}
	p.pool = p.newPool()
	p.sweep(context.Background())
	return p, nil
}

// Close stops the provider's warm containers and waits for the removal
// of destroyed sandboxes' containers. Sandboxes are not affected.
func (p *Provider) Close() error {
	p.pool.Close()
	p.cleanups.Wait()
	p.clients.Close()
	if p.net != nil {
		p.net.Close()
	}
	p.cfg.hostNet.Close()
	return p.images.Close()
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Pause: true, HostBound: true, CPU: true, Memory: true, Pids: true, Disk: true, RootFS: true, Image: true,
		Network: p.net != nil, NetworkAllow: p.net != nil,
		NetworkCredentials: p.net != nil && p.cfg.Network.Credentials != nil}
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	if err := p.checkSpec(spec); err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = records.NewID()
	}
	unlock, err := p.lock(spec.ID)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", spec.ID, err)
	}
	defer unlock()
	if sb, err := p.get(spec.ID); err == nil {
		return sb, nil // it exists: creation is idempotent
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	if spec.Image != "" {
		if spec.RootFS, err = p.images.RootFS(ctx, spec.Image); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
	}
	res := p.resources(spec.Resources)
	var plan *netPlan
	if p.net != nil {
		// Without a record, whatever link the id has is a crashed
		// creator's.
		if err := p.net.Detach(ctx, spec.ID); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
		if spec.Network.Mode != provider.NetworkNone {
			plan = &netPlan{id: spec.ID, policy: spec.Network}
		}
	}
	var c *container
	if plan == nil {
		c = p.takeWarm(spec.RootFS, res)
	}
	if c == nil {
		if c, err = p.startContainer(ctx, spec.RootFS, res, plan); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
	}
	rec, err := p.claim(ctx, c, spec, res)
	if err != nil {
		c.release()
		if terr := p.teardown(context.WithoutCancel(ctx), c.id); terr != nil {
			p.log.Warn("remove a container whose claim failed", "container", c.id, "err", terr)
		}
		if plan != nil {
			if derr := p.net.Detach(context.WithoutCancel(ctx), spec.ID); derr != nil {
				p.log.Warn("remove the network of a sandbox whose claim failed", "id", spec.ID, "err", derr)
			}
		}
		return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	return p.handle(rec), nil
}

func (p *Provider) checkSpec(spec provider.Spec) error {
	return sandboxspec.Offer{Name: Name, MinDisk: MinDisk, RootFS: true, Network: p.net != nil, NetworkAllow: p.net != nil}.Check(spec)
}

func (p *Provider) resources(r provider.Resources) provider.Resources {
	return settings.Fill(r, p.cfg.Defaults)
}

// Get implements provider.Provider.
func (p *Provider) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	if err := provider.ValidateID(id); err != nil {
		return nil, err
	}
	sb, err := p.get(id)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

func (p *Provider) get(id string) (*sandbox, error) {
	rec, err := p.readRecord(id)
	if err != nil {
		return nil, err
	}
	return p.handle(rec), nil
}

func (p *Provider) handle(rec *record) *sandbox {
	s := &sandbox{p: p, rec: rec, client: p.client(rec)}
	s.Served = sandboxd.Served{Client: s.client, Ready: s.ready, Check: s.check}
	return s
}

// client returns the shared client of a sandbox.
func (p *Provider) client(rec *record) *sandboxd.Client {
	return p.clients.Get(rec.ID, func() *sandboxd.Client { return p.newClient(rec.Container) })
}

// List implements provider.Provider.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]provider.Info, error) {
	ids, err := records.IDs(p.cfg.StateDir, recordSuffix)
	if err != nil {
		return nil, err
	}
	return records.List(ctx, ids, p.get, labels)
}

// sweep removes the containers that no record names and whose owner
// lock is free (see ownerFile): warm containers of processes that died,
// and sandboxes whose creation or destruction was cut short. Recent
// ones are left alone: their creator may not have locked them yet.
func (p *Provider) sweep(ctx context.Context) {
	for _, e := range records.Stale(filepath.Join(p.cfg.StateDir, containersDir), time.Minute) {
		owner, err := lockOwner(p.containerDir(e.Name()))
		if err != nil {
			continue // its creator lives
		}
		// Looked at after the lock: a claim writes the record first.
		if !p.named(e.Name()) {
			if err := p.teardown(ctx, e.Name()); err != nil {
				p.log.Warn("sweep a stale container", "container", e.Name(), "err", err)
			}
		}
		owner.Close()
	}
}

// named reports whether a record names container cid.
func (p *Provider) named(cid string) bool {
	entries, _ := os.ReadDir(p.cfg.StateDir)
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), recordSuffix); ok {
			if rec, err := p.readRecord(id); err == nil && rec.Container == cid {
				return true
			}
		}
	}
	return false
}

// remove destroys a sandbox. It returns once runsc's sandbox process,
// and with it everything the sandbox ran, is dead and the record is
// gone; runsc's cleanup of the container (1.3-1.5 s of runsc delete
// here), the workspace's mount and the files follow in the background
// (Close waits for them, and a provider opened after a crash finishes
// them: see sweep). The caller holds the sandbox's lock.
func (p *Provider) remove(ctx context.Context, rec *record) error {
	p.clients.Forget(rec.ID)
	if p.net != nil {
		if err := p.net.Detach(ctx, rec.ID); err != nil {
			return fmt.Errorf("destroy %s: %w", rec.ID, err)
		}
	}
	if rec.alive() {
		if err := killProcess(context.WithoutCancel(ctx), rec.PID); err != nil {
			return fmt.Errorf("destroy %s: %w", rec.ID, err)
		}
	}
	if err := os.Remove(p.recordPath(rec.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("destroy %s: %w", rec.ID, err)
	}
	p.cleanups.Go(func() {
		if err := p.teardown(context.Background(), rec.Container); err != nil {
			p.log.Warn("remove a destroyed sandbox's container", "id", rec.ID, "container", rec.Container, "err", err)
		}
	})
	return nil
}

// killProcess kills a process and returns when it is gone.
func killProcess(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return hostproc.Kill(ctx, pid, "process")
}

// env is the base environment of commands in a sandbox.
func env(spec map[string]string) map[string]string {
	return sandboxspec.HostEnv(spec)
}
