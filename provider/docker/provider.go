package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/image"
	"github.com/berth-dev/berth/provider/internal/clients"
	"github.com/berth-dev/berth/provider/internal/hostsock"
	"github.com/berth-dev/berth/provider/internal/idlock"
	"github.com/berth-dev/berth/provider/internal/netns"
	"github.com/berth-dev/berth/provider/internal/records"
	"github.com/berth-dev/berth/provider/internal/sandboxspec"
	"github.com/berth-dev/berth/provider/internal/settings"
	"github.com/berth-dev/berth/sandboxd"
)

// Name is the provider's registered name.
const Name = "docker"

// Labels berth puts on every container it makes.
const (
	LabelProvider = "dev.berth.provider" // "docker"
	LabelStateDir = "dev.berth.state-dir"
	LabelUID      = "dev.berth.uid"
	// LabelOwner names the process (pid) that keeps a warm container;
	// a claimed container keeps the label, which then means nothing.
	LabelOwner = "dev.berth.warm-owner"
)

// Provider makes sandboxes as containers of the local Docker engine.
type Provider struct {
	cfg    Config
	log    *slog.Logger
	docker *client.Client
	pool   *pool
	host   *hostImage     // nil when the configuration names the default image
	net    *netns.Manager // nil without Config.Network

	clients clients.Cache
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Reporter = (*Provider)(nil)
)

// New opens the provider: it checks that the engine answers, and makes
// the state directory.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the docker provider must run as root (it mounts each sandbox's workspace)", errdefs.ErrUnsupported)
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("docker provider: %w", err)
	}
	opts := []client.Opt{client.FromEnv}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: docker provider: %v", errdefs.ErrBadInput, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: docker provider: the Docker engine does not answer: %v", errdefs.ErrUnsupported, oneLine(err))
	}
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, sandboxesDir), filepath.Join(cfg.StateDir, slotsDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			cli.Close()
			return nil, fmt.Errorf("docker provider: %w", err)
		}
	}
	if err := idlock.Create(filepath.Join(cfg.StateDir, lockFile)); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker provider: %w", err)
	}
	p := &Provider{cfg: cfg, log: cfg.Logger, docker: cli}
	if cfg.Network.Enabled() {
		if _, err := p.openNetwork(ctx); err != nil {
			cli.Close()
			return nil, fmt.Errorf("docker provider: %w", err)
		}
	}
	p.pool = &pool{p: p, size: cfg.Pool}
	p.sweepWarm(ctx)
	if cfg.Image == "" {
		p.cfg.Image = cfg.HostImage
		p.host = newHostImage(cli, cfg.HostImage, cfg.hostRoot, cfg.hostBounds, cfg.hostWait, p.log)
		p.host.start()
	}
	return p, nil
}

// Close removes the provider's warm containers. Sandboxes are not
// affected.
func (p *Provider) Close() error {
	if p.host != nil {
		p.host.close()
	}
	p.pool.close()
	p.clients.Close()
	if p.net != nil {
		p.net.Close()
	}
	p.cfg.hostNet.Close()
	return p.docker.Close()
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Report implements provider.Reporter: the default image when it is
// being made or could not be.
func (p *Provider) Report() string {
	if p.host == nil {
		return ""
	}
	return p.host.report()
}

// Capabilities implements provider.Provider. NetworkOpen is offered
// with Config.Network or without (then on Docker's bridge, unpoliced);
// NetworkAllow only with it.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Pause: true, HostBound: true, CPU: true, Memory: true, Pids: true, Disk: true,
		Network: true, NetworkAllow: p.net != nil, Image: true,
		NetworkCredentials: p.net != nil && p.cfg.Network.Credentials != nil}
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	if err := p.checkSpec(spec); err != nil {
		return nil, err
	}
	if spec.Image == "" {
		spec.Image = p.cfg.Image
	}
	if spec.ID == "" {
		spec.ID = records.NewID()
	}
	unlock, err := p.lock(spec.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	sb, err := p.get(spec.ID)
	if err == nil {
		return sb, nil // it exists: creation is idempotent
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	if p.net != nil {
		// Without a record, whatever link the id has is a crashed
		// creator's.
		if err := p.net.Detach(ctx, spec.ID); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
	}
	rec, err := p.create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	sb = p.handle(rec)
	if p.net != nil && spec.Network.Mode != provider.NetworkNone {
		// After the record: a sweep sees a sandbox whose link it must
		// keep; before Create returns: nothing of the sandbox's runs
		// without its rules.
		if err := p.attach(ctx, rec, spec.Network); err != nil {
			if derr := sb.destroy(context.WithoutCancel(ctx), rec); derr != nil {
				p.log.Warn("remove a sandbox whose network failed", "id", spec.ID, "err", derr)
			}
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
	}
	return sb, nil
}

func (p *Provider) checkSpec(spec provider.Spec) error {
	return (sandboxspec.Offer{Name: Name, MinDisk: MinDisk, Network: true, NetworkAllow: p.net != nil}).Check(spec)
}

// create makes a sandbox, from a warm container if one fits.
func (p *Provider) create(ctx context.Context, spec provider.Spec) (*record, error) {
	if p.host.is(spec.Image) {
		if err := p.host.ensure(ctx); err != nil {
			return nil, err
		}
	}
	res := p.resources(spec.Resources)
	// Warm containers have the default memory (their /tmp is sized by
	// it) and workspace size; CPU and process limits are changed on the
	// one taken.
	def := p.resources(provider.Resources{})
	// A warm container has no network: one is attached to it once
	// claimed, unless it would be Docker's bridge.
	bridged := p.net == nil && spec.Network.Mode != provider.NetworkNone
	pooled := spec.Image == p.cfg.Image && !bridged && res.Memory == def.Memory && res.Disk == def.Disk
	if pooled {
		defer p.pool.fill(spec.Image)
		// A warm container may have died while it waited (killed from
		// outside, the engine restarted): then the sandbox gets a new one.
		if w := p.pool.take(); w != nil {
			err := p.fit(ctx, w, res, def)
			var rec *record
			if err == nil {
				rec, err = p.claim(ctx, w, spec, res)
			}
			if err == nil {
				return rec, nil
			}
			p.log.Warn("claim a warm container", "container", w.container, "err", err)
			p.removeSlot(context.WithoutCancel(ctx), w.container, w.uid)
		}
	}
	if err := p.ensureImage(ctx, spec.Image); err != nil {
		return nil, err
	}
	w, err := p.startWarm(ctx, spec.Image, res, bridged)
	if err != nil {
		return nil, err
	}
	rec, err := p.claim(ctx, w, spec, res)
	if err != nil {
		p.removeSlot(context.WithoutCancel(ctx), w.container, w.uid)
		return nil, err
	}
	return rec, nil
}

// fit gives a warm container, made with the default limits def, the
// CPU and process limits of res.
func (p *Provider) fit(ctx context.Context, w *warm, res, def provider.Resources) error {
	if res.CPU == def.CPU && res.Pids == def.Pids {
		return nil
	}
	pids := res.Pids
	_, err := p.docker.ContainerUpdate(ctx, w.container, client.ContainerUpdateOptions{
		Resources: &container.Resources{NanoCPUs: int64(res.CPU * 1e9), PidsLimit: &pids},
	})
	if err != nil {
		return fmt.Errorf("set the limits of a warm container: %v", oneLine(err))
	}
	return nil
}

// claim makes a warm container a sandbox: it publishes the sandbox's
// record and tells the daemon its configuration.
func (p *Provider) claim(ctx context.Context, w *warm, spec provider.Spec, res provider.Resources) (*record, error) {
	rec := &record{Base: records.NewBase(spec, res), Image: spec.Image, Container: w.container, UID: w.uid, Freezer: w.freezer}
	// From the moment the record exists, Destroy finds everything,
	// whatever happens to this process.
	if err := p.writeRecord(rec); err != nil {
		return nil, err
	}
	c := claimMsg(p.cfg.Network.TrustEnv(env(spec.Env), spec.Env), spec.Dir, rec.ExpiresAt, rec.Lease, p.cfg.Limits.userProcesses(res.Pids))
	if err := w.claim(ctx, c); err != nil {
		os.Remove(p.recordPath(rec.ID))
		return nil, err
	}
	p.clients.Adopt(spec.ID, w.client)
	return rec, nil
}

func (p *Provider) resources(r provider.Resources) provider.Resources {
	return settings.Fill(r, p.cfg.Defaults)
}

// Get implements provider.Provider.
func (p *Provider) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	if err := provider.ValidateID(id); err != nil {
		return nil, err
	}
	return p.get(id)
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
	return p.clients.Get(rec.ID, func() *sandboxd.Client {
		return sandboxd.NewClient(hostsock.Dialer(filepath.Join(p.slotPath(rec.UID), runDir, socketName), daemonUID))
	})
}

// List implements provider.Provider.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]provider.Info, error) {
	ids, err := records.IDs(filepath.Join(p.cfg.StateDir, sandboxesDir), ".json")
	if err != nil {
		return nil, err
	}
	return records.List(ctx, ids, p.get, labels)
}

// removeSlot removes a container, its workspace's mount and its slot
// directory. Each step tolerates what an earlier attempt already did.
func (p *Provider) removeSlot(ctx context.Context, container string, uid int) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if container != "" {
		_, err := p.docker.ContainerRemove(ctx, container, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove container: %v", oneLine(err))
		}
	}
	dir := p.slotPath(uid)
	if err := unmountWorkspace(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ensureImage makes sure an image is on the host, pulling it if a
// registry has it.
func (p *Provider) ensureImage(ctx context.Context, ref string) error {
	_, err := p.docker.ImageInspect(ctx, ref)
	if err == nil {
		return nil
	}
	if cerrdefs.IsInvalidArgument(err) {
		return fmt.Errorf("%w: image %.200q is not a valid image reference", errdefs.ErrBadInput, ref)
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %.200q: %v", ref, oneLine(err))
	}
	p.log.Info("pulling image", "image", ref)
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PullTimeout)
	defer cancel()
	err = image.Pull(ctx, p.docker, ref, p.log)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return fmt.Errorf("pull image %.200q: not done after %v", ref, p.cfg.PullTimeout)
	}
	return fmt.Errorf("%w: image %.200q is not on this host and cannot be pulled (%s): docker pull it where a registry is reachable, or bring it with docker load or docker import", errdefs.ErrBadInput, ref, oneLine(err))
}

// oneLine keeps the first line of an error from Docker: errors berth
// reports are one line.
func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// env is the base environment of commands, over the image's.
func env(spec map[string]string) map[string]string {
	return sandboxspec.Env(spec)
}

// encode is json.Marshal for values that cannot fail.
func encode(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
