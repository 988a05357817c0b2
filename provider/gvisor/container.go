package gvisor

import (
	"github.com/berth-dev/berth/internal/randid"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/gvisor/gvisorinit"
	"github.com/berth-dev/berth/provider/internal/hostproc"
	"github.com/berth-dev/berth/provider/internal/hostsock"
	"github.com/berth-dev/berth/provider/internal/records"
	"github.com/berth-dev/berth/provider/internal/warmclaim"
	"github.com/berth-dev/berth/provider/internal/wsimage"
	"github.com/berth-dev/berth/sandboxd"
)

// startTimeout bounds how long a container may take to start serving.
const startTimeout = 30 * time.Second

// container is a started runsc container whose daemon serves and waits
// to be claimed by a sandbox.
type container struct {
	id       string // runsc's container id
	dir      string
	pid      int // runsc's sandbox process
	pidStart uint64
	rootfs   string
	res      provider.Resources
	client   *sandboxd.Client // a connection open already
	// owner holds the container's owner lock until a sandbox claims it
	// (see ownerFile).
	owner *os.File
}

// ownerFile, in a container's directory, is locked (flock) by the
// process that started the container for as long as no sandbox has
// claimed it: a container that no record names and whose lock is free
// was left by a process that died, and is swept.
const ownerFile = "owner.lock"

// lockOwner takes a container's owner lock, without waiting.
func lockOwner(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, ownerFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// release ends this process's hold on a container's handle.
func (c *container) release() {
	c.client.Close()
	c.owner.Close()
}

// startContainer makes a container's bundle and workspace and starts
// it, with the network of plan unless it is nil.
func (p *Provider) startContainer(ctx context.Context, rootfs string, res provider.Resources, plan *netPlan) (c *container, err error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	cid := "g-" + randid.Hex(8)
	dir := p.containerDir(cid)
	defer func() {
		if err != nil {
			if terr := p.teardown(context.WithoutCancel(ctx), cid); terr != nil {
				p.log.Warn("remove a container that failed to start", "container", cid, "err", terr)
			}
		}
	}()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	owner, err := lockOwner(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			owner.Close()
		}
	}()
	stat, err := makeMemoryCgroup(cid, hostMemory(res.Memory))
	if err != nil {
		return nil, err
	}
	if stat != nil {
		defer stat.Close() // the sandbox has its own once started
	}
	b := bundleSpec{dir: dir, rootfs: rootfs, daemon: p.cfg.DaemonPath, resources: res,
		openFiles: p.cfg.OpenFiles, cgroup: cgroupPath(cid), hostStat: stat != nil}
	if p.net != nil {
		b.resolvConf = p.net.ResolvConf()
		b.proxyCA = p.cfg.Network.TrustCA()
	}
	if plan != nil {
		ns, aerr := p.attachNew(ctx, plan)
		if aerr != nil {
			return nil, aerr
		}
		// The sandbox process holds the namespace once started.
		defer ns.Close()
		defer func() {
			if err != nil {
				if derr := p.net.Detach(context.WithoutCancel(ctx), plan.id); derr != nil {
					p.log.Warn("remove the network of a container that failed to start", "id", plan.id, "err", derr)
				}
			}
		}()
		b.netns = netnsPath(ns)
	}
	if err := writeBundle(b); err != nil {
		return nil, err
	}
	err = wsimage.Make(filepath.Join(dir, imageFile), filepath.Join(dir, workspaceDir), res.Disk, sandboxUID, sandboxGID)
	if err != nil {
		return nil, err
	}
	pid, err := p.runContainer(ctx, cid, dir, stat, plan != nil)
	if err != nil {
		return nil, err
	}
	start, err := hostproc.Start(pid)
	if err != nil {
		return nil, fmt.Errorf("sandbox process %d: %w%s", pid, err, logTail(dir))
	}
	c = &container{id: cid, dir: dir, pid: pid, pidStart: start, rootfs: rootfs, res: res,
		client: p.newClient(cid), owner: owner}
	// The daemon's socket appears once it listens; one request opens
	// the connection the sandbox's first command will use.
	for {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		_, err = c.client.Health(hctx)
		hcancel()
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("daemon did not answer: %w%s", err, logTail(dir))
		}
		if !hostproc.Alive(c.pid, c.pidStart) {
			return nil, fmt.Errorf("sandbox exited%s", logTail(dir))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// cgroupPath is where runsc puts a container's cgroups.
func cgroupPath(cid string) string { return "/berth-gvisor/" + cid }

func (p *Provider) socket(cid, name string) string {
	return filepath.Join(p.containerDir(cid), runSubdir, name)
}

func (p *Provider) newClient(cid string) *sandboxd.Client {
	sock := p.socket(cid, gvisorinit.SocketName)
	return sandboxd.NewClient(func(ctx context.Context) (net.Conn, error) { return dialUnix(ctx, sock) })
}

// claim makes a started container the container of a new sandbox: it
// tells the daemon, then records the sandbox.
func (p *Provider) claim(ctx context.Context, c *container, spec provider.Spec, res provider.Resources) (*record, error) {
	rec := &record{Base: records.NewBase(spec, res), Container: c.id, PID: c.pid, PIDStart: c.pidStart}
	msg := warmclaim.Claim{Env: p.cfg.Network.TrustEnv(env(spec.Env), spec.Env), Dir: spec.Dir, ExpiresAt: rec.ExpiresAt, Lease: rec.Lease,
		UserProcesses: userProcesses(res.Pids)}
	if err := p.sendClaim(ctx, c.id, msg); err != nil {
		return nil, fmt.Errorf("claim daemon: %w%s", err, logTail(c.dir))
	}
	if err := p.writeRecord(rec); err != nil {
		return nil, err
	}
	p.clients.Adopt(spec.ID, c.client)
	c.owner.Close() // the record names it now
	return rec, nil
}

func (p *Provider) sendClaim(ctx context.Context, cid string, msg warmclaim.Claim) error {
	sock := p.socket(cid, gvisorinit.ControlSocket)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dialUnix(ctx, sock) },
	}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	return warmclaim.Send(ctx, hc, msg)
}

// daemonReserve is how many of a sandbox's processes are kept for its
// daemon: the sandbox user's RLIMIT_NPROC is the rest, so that a fork
// bomb leaves the daemon room to serve.
const daemonReserve = 32

func userProcesses(pids int64) int64 { return pids - min(daemonReserve, pids/4) }

// teardown stops a container and removes all it held: runsc's sandbox
// and gofer processes (those of its memory cgroup, whether runsc knows
// them or not), its cgroups and state, the workspace's mount and loop
// device, and its directory. A container that is already gone is
// not an error.
func (p *Provider) teardown(ctx context.Context, cid string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dir := p.containerDir(cid)
	if _, err := p.runsc(ctx, "delete", "--force", cid); err != nil {
		if _, serr := p.state(ctx, cid); serr == nil {
			return fmt.Errorf("destroy container %s: %w", cid, err)
		}
		// runsc no longer knows it: never started, deleted already, or
		// started by a runsc run killed half-way, whose processes run.
	}
	if err := killCgroup(cid); err != nil {
		return fmt.Errorf("destroy container %s: %w", cid, err)
	}
	if err := wsimage.Unmount(filepath.Join(dir, workspaceDir)); err != nil {
		return fmt.Errorf("destroy container %s: %w", cid, err)
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("destroy container %s: %w", cid, err)
	}
	if err := removeCgroups(cid); err != nil {
		return fmt.Errorf("destroy container %s: %w", cid, err)
	}
	return nil
}

// dialUnix connects to a daemon's socket by path, however long the
// path. The run directory is the sandbox's to write (its gofer makes
// there whatever the sandbox makes in it), so hostsock checks that what
// is at the socket's name is a socket the gofer made, as root, and not
// a link to another sandbox's.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	return hostsock.Dial(ctx, path, 0)
}
