package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/image"
	"github.com/berth-dev/berth/sandboxd"
)

// Name is the provider's registered name.
const Name = "gvisor"

func init() {
	provider.Register(Name, func(ctx context.Context, pc provider.Config) (provider.Provider, error) {
		cfg, err := fromProviderConfig(pc)
		if err != nil {
			return nil, err
		}
		cfg.Logger = provider.LoggerFrom(ctx)
		return New(cfg)
	})
}

// Provider makes sandboxes that are runsc containers on this host.
type Provider struct {
	cfg      Config
	log      *slog.Logger
	pool     *pool
	cleanups sync.WaitGroup // removals of destroyed sandboxes' containers

	images *image.Cache // root filesystems of Spec.Image

	mu      sync.Mutex
	clients map[string]*sandboxd.Client // by sandbox id, to reuse connections
}

var _ provider.Provider = (*Provider)(nil)

// New opens the provider on cfg.StateDir, creating it if needed.
func New(cfg Config) (*Provider, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the gvisor provider must run as root (it mounts workspace images and makes cgroups)", provider.ErrUnsupported)
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("gvisor provider: %w", err)
	}
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, runscDir), filepath.Join(cfg.StateDir, containersDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor provider: %w", err)
		}
	}
	f, err := os.OpenFile(filepath.Join(cfg.StateDir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("gvisor provider: %w", err)
	}
	f.Close()
	// gVisor's root is the host's root: an image's owners are kept as
	// they are, unshifted (a cache of its own, apart from linux's).
	images, err := image.Open(cfg.ImageDir, image.WithLogger(cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("gvisor provider: %w", err)
	}
	p := &Provider{cfg: cfg, log: cfg.Logger, images: images, clients: map[string]*sandboxd.Client{}}
	p.pool = &pool{p: p, size: cfg.Pool}
	p.sweep(context.Background())
	return p, nil
}

// Close stops the provider's warm containers and waits for the removal
// of destroyed sandboxes' containers. Sandboxes are not affected.
func (p *Provider) Close() error {
	p.pool.close()
	p.cleanups.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, c := range p.clients {
		c.Close()
		delete(p.clients, id)
	}
	return p.images.Close()
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Pause: true, HostBound: true, CPU: true, Memory: true, Pids: true, Disk: true, RootFS: true, Image: true}
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	if err := p.checkSpec(spec); err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = "sb-" + randomHex(8)
	}
	unlock, err := p.lock(spec.ID)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", spec.ID, err)
	}
	defer unlock()
	if sb, err := p.get(spec.ID); err == nil {
		return sb, nil // it exists: creation is idempotent
	} else if !errors.Is(err, provider.ErrNotFound) {
		return nil, err
	}
	if spec.Image != "" {
		if spec.RootFS, err = p.images.RootFS(ctx, spec.Image); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
	}
	res := p.resources(spec.Resources)
	c := p.pool.take(spec.RootFS, res)
	if c == nil {
		if c, err = p.startContainer(ctx, spec.RootFS, res); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
	}
	rec, err := p.claim(ctx, c, spec, res)
	if err != nil {
		c.release()
		if terr := p.teardown(context.WithoutCancel(ctx), c.id); terr != nil {
			p.log.Warn("remove a container whose claim failed", "container", c.id, "err", terr)
		}
		return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	return p.handle(rec), nil
}

func (p *Provider) checkSpec(spec provider.Spec) error {
	if err := provider.ValidateSpec(spec); err != nil {
		return err
	}
	if spec.Image != "" && spec.RootFS != "" {
		return fmt.Errorf("%w: an image and a root filesystem directory: give one", provider.ErrBadInput)
	}
	if spec.Network != provider.NetworkNone {
		return fmt.Errorf("%w: the gvisor provider offers no network beyond loopback", provider.ErrUnsupported)
	}
	if d := spec.Resources.Disk; d != 0 && d < MinDisk {
		return fmt.Errorf("%w: a workspace of %d bytes is below the minimum of %d (16 MiB)", provider.ErrBadInput, d, int64(MinDisk))
	}
	if spec.RootFS != "" {
		fi, err := os.Stat(spec.RootFS)
		if err != nil || !fi.IsDir() || !filepath.IsAbs(spec.RootFS) {
			return fmt.Errorf("%w: root filesystem %q must be an absolute path to a directory", provider.ErrBadInput, spec.RootFS)
		}
	}
	return nil
}

func (p *Provider) resources(r provider.Resources) provider.Resources {
	if r.Memory == 0 {
		r.Memory = p.cfg.Defaults.Memory
	}
	if r.Pids == 0 {
		r.Pids = p.cfg.Defaults.Pids
	}
	if r.CPU == 0 {
		r.CPU = p.cfg.Defaults.CPU
	}
	if r.Disk == 0 {
		r.Disk = p.cfg.Defaults.Disk
	}
	return r
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
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[rec.ID]
	if !ok {
		c = p.newClient(rec.Container)
		p.clients[rec.ID] = c
	}
	return c
}

// adopt makes c the shared client of a sandbox.
func (p *Provider) adopt(id string, c *sandboxd.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.clients[id]; ok {
		old.Close()
	}
	p.clients[id] = c
}

func (p *Provider) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[id]; ok {
		c.Close()
		delete(p.clients, id)
	}
}

// List implements provider.Provider.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]provider.Info, error) {
	entries, err := os.ReadDir(p.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	var infos []provider.Info
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), recordSuffix)
		if !ok || provider.ValidateID(id) != nil {
			continue
		}
		sb, err := p.get(id)
		if err != nil {
			continue // destroyed meanwhile
		}
		if !matches(sb.rec.Labels, labels) {
			continue
		}
		info, err := sb.Info(ctx)
		if err != nil {
			continue
		}
		infos = append(infos, info)
	}
	return infos, nil
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// sweep removes the containers that no record names and whose owner
// lock is free (see ownerFile): warm containers of processes that died,
// and sandboxes whose creation or destruction was cut short. Recent
// ones are left alone: their creator may not have locked them yet.
func (p *Provider) sweep(ctx context.Context) {
	containers, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, containersDir))
	for _, e := range containers {
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
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
	p.forget(rec.ID)
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
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	for {
		// A pidfd polls readable when its process has exited.
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 10)
		if n > 0 {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("process %d did not exit: %w", pid, ctx.Err())
		}
	}
}

// env is the base environment of commands in a sandbox.
func env(spec map[string]string) map[string]string {
	m := map[string]string{
		"PATH":    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME":    provider.Workspace,
		"USER":    "sandbox",
		"LOGNAME": "sandbox",
		"LANG":    "C.UTF-8",
		"TMPDIR":  "/tmp",
	}
	maps.Copy(m, spec)
	return m
}
