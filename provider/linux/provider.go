package linux

import (
	"github.com/berth-dev/berth/internal/randid"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/image"
	"github.com/berth-dev/berth/provider/internal/clients"
	"github.com/berth-dev/berth/provider/internal/idlock"
	"github.com/berth-dev/berth/provider/internal/netns"
	"github.com/berth-dev/berth/provider/internal/records"
	"github.com/berth-dev/berth/provider/internal/sandboxspec"
	"github.com/berth-dev/berth/provider/internal/warmpool"
	"github.com/berth-dev/berth/sandboxd"
)

// Name is the provider's registered name.
const Name = "linux"

// Provider makes sandboxes on this host.
type Provider struct {
	cfg      Config
	log      *slog.Logger
	pool     *warmpool.Pool[*warm]
	images   *image.Cache
	cleanups sync.WaitGroup // removals of destroyed sandboxes' cgroups and files
	closing  context.CancelFunc

	clients clients.Cache
	// net plumbs sandboxes' networks; nil when Config.Network is off.
	net *netns.Manager

	mu   sync.Mutex
	held map[string]*os.File // by sandbox id: see holdWorkspace
}

var _ provider.Provider = (*Provider)(nil)

// New opens the provider on cfg.StateDir, creating it if needed.
func New(cfg Config) (*Provider, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the linux provider must run as root", errdefs.ErrUnsupported)
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("linux provider: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("linux provider: %w", err)
	}
	if err := checkTraversable(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("linux provider: %w", err)
	}
	// The directory every daemon mounts its sandbox's root on, each in
	// its own mount namespace, and where warm daemons log.
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, newRootDir), 0o755); err != nil {
		return nil, fmt.Errorf("linux provider: %w", err)
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{warmDir, 0o711}, {trashDir, 0o700}} {
		if err := os.MkdirAll(filepath.Join(cfg.StateDir, d.name), d.mode); err != nil {
			return nil, fmt.Errorf("linux provider: %w", err)
		}
	}
	if err := idlock.Create(filepath.Join(cfg.StateDir, lockFile)); err != nil {
		return nil, fmt.Errorf("linux provider: %w", err)
	}
	images, err := image.Open(cfg.ImageDir, image.WithIDShift(cfg.UIDBase), image.WithLogger(cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("linux provider: %w", err)
	}
	p := &Provider{cfg: cfg, log: cfg.Logger, images: images, held: map[string]*os.File{}}
	if cfg.Network.Enabled() {
		if p.net, err = p.openNetwork(); err != nil {
			images.Close()
			return nil, fmt.Errorf("linux provider: %w", err)
		}
	}
	p.pool = p.newPool()
	p.sweepWarm()
	p.sweepTrash()
	var ctx context.Context
	ctx, p.closing = context.WithCancel(context.Background())
	p.cleanups.Go(func() { sweepStaleCgroups(ctx, p.log, staleCgroupSettle) })
	return p, nil
}

// staleCgroupSettle is how long an empty cgroup must stay empty to be
// taken for stale.
const staleCgroupSettle = 10 * time.Second

// Close stops the provider's warm daemons and waits for the cleanup of
// destroyed sandboxes to finish. Sandboxes are not affected.
func (p *Provider) Close() error {
	p.closing()
	p.pool.Close()
	p.cleanups.Wait()
	p.releaseWorkspaces()
	if p.net != nil {
		p.net.Close()
	}
	p.cfg.hostNet.Close()
	return p.images.Close()
}

func (p *Provider) newRoot() string { return filepath.Join(p.cfg.StateDir, newRootDir) }

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
	unlock, err := lock(p.cfg.StateDir, spec.ID)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", spec.ID, err)
	}
	defer unlock()
	if sb, err := p.get(spec.ID); err == nil || !errors.Is(err, errdefs.ErrNotFound) {
		return sb, err // it exists: creation is idempotent
	}
	// A directory without a record is what a creator that crashed left.
	if err := p.remove(ctx, spec.ID, nil); err != nil {
		return nil, err
	}
	rec, err := p.create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("linux sandbox %s: %w", spec.ID, err)
	}
	if spec.Network.Mode != provider.NetworkNone {
		if _, err := p.net.Attach(ctx, spec.ID, "", rec.PID, spec.Network); err != nil {
			_ = p.remove(ctx, spec.ID, rec)
			return nil, fmt.Errorf("linux sandbox %s: %w", spec.ID, err)
		}
	}
	return p.handle(rec), nil
}

func (p *Provider) checkSpec(spec provider.Spec) error {
	return sandboxspec.Offer{Name: Name, MinDisk: MinDisk, RootFS: true, Network: p.net != nil, NetworkAllow: p.net != nil}.Check(spec)
}

// Get implements provider.Provider.
func (p *Provider) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	if err := provider.ValidateID(id); err != nil {
		return nil, err
	}
	return p.get(id)
}

func (p *Provider) get(id string) (*sandbox, error) {
	rec, err := readRecord(filepath.Join(p.cfg.StateDir, id), id)
	if err != nil {
		return nil, err
	}
	return p.handle(rec), nil
}

func (p *Provider) handle(rec *record) *sandbox {
	s := &sandbox{p: p, rec: rec, client: p.client(rec.ID)}
	s.Served = sandboxd.Served{Client: s.client, Ready: s.ready, Check: s.check}
	return s
}

// client returns the shared client of a sandbox.
func (p *Provider) client(id string) *sandboxd.Client {
	return p.clients.Get(id, func() *sandboxd.Client {
		sock := socketPath(p.cfg.StateDir, id)
		return sandboxd.NewClient(func(ctx context.Context) (net.Conn, error) { return dialUnix(ctx, sock) })
	})
}

// List implements provider.Provider.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]provider.Info, error) {
	ids, err := records.IDs(p.cfg.StateDir, "")
	if err != nil {
		return nil, err
	}
	return records.List(ctx, ids, p.get, labels)
}

// remove destroys what is left of a sandbox. It returns once every
// process of the sandbox is dead and its directory is out of sight; its
// cgroups and files are removed in the background (Close waits for that,
// and a provider opened after a crash finishes the job). rec may be nil
// when there is no record. The caller holds the sandbox's lock.
func (p *Provider) remove(ctx context.Context, id string, rec *record) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	p.clients.Forget(id)
	if p.net != nil {
		if err := p.net.Detach(ctx, id); err != nil {
			return fmt.Errorf("destroy %s: %w", id, err)
		}
	}
	if rec != nil {
		// A frozen daemon cannot die. Reading the freezer's state costs
		// less than loading the cgroups, which the cleanup does.
		if frozen, err := rec.Cgroup.frozen(); err == nil && frozen {
			if cg, err := loadCgroup(rec.Cgroup); err == nil {
				_ = cg.thaw()
			}
		}
		if rec.alive() {
			if err := killDaemon(ctx, rec.PID); err != nil {
				return fmt.Errorf("destroy %s: %w", id, err)
			}
		}
	}
	dir := filepath.Join(p.cfg.StateDir, id)
	trash := filepath.Join(p.cfg.StateDir, trashDir, id+"-"+randid.Hex(4))
	if err := os.Rename(dir, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			trash = ""
		} else {
			return fmt.Errorf("destroy %s: %w", id, err)
		}
	}
	held := p.releaseWorkspace(id)
	p.cleanups.Go(func() {
		held.Close() // the workspace's file system and loop device go now
		if rec != nil {
			cg, err := loadCgroup(rec.Cgroup)
			if err == nil {
				err = cg.destroy(context.Background())
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				p.log.Warn("remove cgroups of a destroyed sandbox", "id", id, "err", err)
				return // left in the trash, with its record, for the next sweep
			}
		}
		if trash != "" {
			if err := os.RemoveAll(trash); err != nil {
				p.log.Warn("remove files of a destroyed sandbox", "id", id, "err", err)
			}
		}
	})
	return nil
}

// sweepTrash finishes removing sandboxes destroyed by a process that died
// before it was done.
func (p *Provider) sweepTrash() {
	// Younger ones may be being removed right now.
	for _, e := range records.Stale(filepath.Join(p.cfg.StateDir, trashDir), time.Minute) {
		dir := filepath.Join(p.cfg.StateDir, trashDir, e.Name())
		if rec, err := readRecord(dir, e.Name()); err == nil {
			if cg, err := loadCgroup(rec.Cgroup); err == nil {
				if pids, err := cg.pids(); err != nil || len(pids) > 0 || cg.destroy(context.Background()) != nil {
					continue
				}
			}
		}
		os.RemoveAll(dir)
	}
}

// checkTraversable checks that a sandbox's daemon, which runs under ids
// of its own, can reach its workspace below dir: every directory on the
// way must let others search it.
func checkTraversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s: %s must be searchable by others (chmod o+x), for sandboxes to reach what is in it", dir, d)
		}
		if d == "/" {
			return nil
		}
	}
}

// env is the base environment of commands in a sandbox.
func env(spec map[string]string) map[string]string {
	return sandboxspec.HostEnv(spec)
}
