package linux

import (
	"github.com/berth-dev/berth/internal/randid"

	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostproc"
	"github.com/berth-dev/berth/provider/internal/hostsock"
	"github.com/berth-dev/berth/provider/internal/records"
	"github.com/berth-dev/berth/provider/internal/settings"
	"github.com/berth-dev/berth/provider/linux/linuxinit"
	"github.com/berth-dev/berth/sandboxd"
)

// startTimeout bounds how long a daemon may take to get warm or ready.
const startTimeout = 30 * time.Second

// warm is a daemon that has built its namespaces, cgroups and root, and
// waits to be claimed by a sandbox.
type warm struct {
	cmd *exec.Cmd
	ctl *os.File
	cg  *cgroup
	// res is the limits its cgroups hold.
	res      provider.Resources
	pidStart uint64
	dir      string // its state directory, to be renamed after its sandbox
	// record is the empty record file in dir, which the claim writes.
	record *os.File
	// workspace is a reference to the workspace's mount; see holdWorkspace.
	workspace *os.File
	// client has a connection to the daemon open already; it dials the
	// socket at socket, which a claim changes.
	client *sandboxd.Client
	socket atomic.Pointer[string]
}

// kill ends an unclaimed daemon and removes its cgroups and files.
func (w *warm) kill() {
	if w.client != nil {
		w.client.Close()
	}
	w.ctl.Close() // the daemon exits when its control socket closes
	w.record.Close()
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
	_ = w.cg.destroy(context.Background())
	w.workspace.Close()
	_ = os.RemoveAll(w.dir)
}

// startWarm starts a daemon and waits until it is warm. rootfs, if not
// empty, is the root filesystem it builds its root from; memory is the
// memory limit its /tmp and /dev/shm are sized for, disk the size of its
// workspace.
func (p *Provider) startWarm(ctx context.Context, rootfs string, memory, disk int64) (w *warm, err error) {
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	name := "warm-" + randid.Hex(8)
	paths, err := pathsFor(name)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(p.cfg.StateDir, warmDir, name)
	undo.add(func() { os.RemoveAll(dir) })
	lnFile, err := p.makeStateDir(dir)
	if err != nil {
		return nil, err
	}
	undo.add(func() { lnFile.Close() })
	workspace := p.formatWorkspace(dir, disk)
	undo.add(func() {
		if mnt, err := workspace(); err == nil {
			mnt.Close()
		}
	})
	cg, err := newCgroup(paths, p.cfg.Defaults, p.cfg.Limits.commandMemory(p.cfg.Defaults.Memory))
	if err != nil {
		return nil, err
	}
	undo.add(func() { cg.destroy(context.WithoutCancel(ctx)) })

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ctl, child := os.NewFile(uintptr(pair[0]), "control"), os.NewFile(uintptr(pair[1]), "control")
	defer child.Close()
	undo.add(func() { ctl.Close() })
	oom, err := cg.oomFile()
	if err != nil {
		return nil, fmt.Errorf("open out-of-memory counter: %w", err)
	}
	defer oom.Close()
	// The daemon is executed through a descriptor the host opened: its
	// path may be in directories the sandbox's ids cannot traverse.
	exe, err := os.OpenFile(p.cfg.DaemonPath, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open daemon binary: %w", err)
	}
	defer exe.Close()
	logPath := filepath.Join(dir, logFile)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmds, err := cg.cmdsTasks()
	if err != nil {
		return nil, fmt.Errorf("open commands' cgroup: %w", err)
	}
	defer cmds.Close()
	// The daemon keeps the lock on its owner uid for as long as it
	// lives.
	owner, ownerLock, err := p.allocOwner()
	if err != nil {
		return nil, err
	}
	defer ownerLock.Close()

	cmd := p.daemonCommand(owner, logf, child, oom, exe, ownerLock, cmds)
	if err := startOwnedBy(cmd, owner); err != nil {
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	undo.add(func() { cmd.Process.Kill(); cmd.Wait() })
	// The daemon builds its root while it is moved into its cgroups; it
	// runs nothing of a sandbox's before it is claimed, so the limits
	// hold for all of it.
	if err := cg.add(cmd.Process.Pid); err != nil {
		return nil, fmt.Errorf("put daemon in its cgroups: %w", err)
	}
	// The kernel must not pick the daemon when the sandbox runs out of
	// memory: the sandbox would be lost. Its commands start at 1000, so
	// it is picked last at 0 already; -1000, which needs the host's
	// CAP_SYS_RESOURCE, makes it never.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", cmd.Process.Pid), []byte("-1000"), 0); err != nil {
		p.log.Debug("protect daemon from the out-of-memory killer", "err", err)
	}
	wm := linuxinit.WarmMsg{NewRoot: p.newRoot(), RootFS: rootfs != "",
		Limits: p.cfg.Limits.daemon(), TmpSize: p.cfg.Limits.tmpSize(memory)}
	if p.net != nil {
		wm.ResolvConf = p.net.ResolvConf()
		wm.ProxyCA = string(p.cfg.Network.ProxyCA)
	}
	err = sendJSON(ctl, wm, lnFile)
	// The daemon holds the listening socket now, and alone: should it
	// die, connecting fails at once instead of waiting in the backlog.
	lnFile.Close()
	if err != nil {
		return nil, fmt.Errorf("configure daemon: %w", err)
	}
	if rootfs != "" {
		if err := p.sendRootFS(ctl, rootfs, owner); err != nil {
			return nil, fmt.Errorf("configure daemon: %w", err)
		}
	}
	mnt, err := workspace()
	if err != nil {
		return nil, err
	}
	if err := linuxinit.Send(ctl, []byte(linuxinit.MsgWorkspace), mnt); err != nil {
		return nil, fmt.Errorf("configure daemon: %w", err)
	}
	if err := recvReply(ctl, linuxinit.ReplyWarm, deadline(ctx)); err != nil {
		return nil, daemonError(err, logPath)
	}
	start, err := hostproc.Start(cmd.Process.Pid)
	if err != nil {
		return nil, fmt.Errorf("daemon exited: %w", err)
	}
	rf, err := createRecord(dir)
	if err != nil {
		return nil, err
	}
	undo.add(func() { rf.Close() })
	w = &warm{cmd: cmd, ctl: ctl, cg: cg, res: p.cfg.Defaults, pidStart: start, dir: dir, workspace: mnt, record: rf}
	sock := filepath.Join(dir, socketFile)
	w.socket.Store(&sock)
	w.client = sandboxd.NewClient(func(ctx context.Context) (net.Conn, error) {
		return dialUnix(ctx, *w.socket.Load())
	})
	// One request opens the connection the sandbox's first command will
	// use, and runs the daemon's request path once.
	hctx, cancel := context.WithDeadline(ctx, deadline(ctx))
	defer cancel()
	if _, err := w.client.Health(hctx); err != nil {
		return nil, daemonError(fmt.Errorf("first request: %w", err), logPath)
	}
	return w, nil
}

// sendRootFS sends the daemon the root filesystem directory rootfs as
// a detached mount, read-only, nosuid and nodev, which it attaches in
// its own mount namespace: it reaches the directory by no path. The
// mount shows files of UIDBase as the sandbox's root's (see
// imageIDMap), on file systems that can map ids; on others they are
// nobody's.
func (p *Provider) sendRootFS(ctl *os.File, rootfs string, owner int) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, rootfs, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("root filesystem %s: %w", rootfs, err)
	}
	tree := os.NewFile(uintptr(fd), "rootfs")
	defer tree.Close()
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("root filesystem %s: %w", rootfs, err)
	}
	if err := p.mapIDs(fd, owner); err != nil {
		p.log.Warn("root filesystem: its files are not mapped to the sandbox's ids, its root's show as nobody's", "rootfs", rootfs, "err", err)
	}
	return linuxinit.Send(ctl, []byte(linuxinit.MsgRootFS), tree)
}

// mapIDs gives the detached mount tree an id mapping that shows files
// of UIDBase as those of the root of the sandbox owned by owner.
func (p *Provider) mapIDs(tree, owner int) error {
	userns, err := p.imageIDMap(owner)
	if err != nil {
		return err
	}
	defer userns.Close()
	idmap := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	return unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &idmap)
}

// dialUnix connects to a daemon's socket by path, however long the
// path. The host made the socket (see makeStateDir), so it is root's;
// hostsock refuses anything else at its name.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	return hostsock.Dial(ctx, path, 0)
}

// makeStateDir makes a daemon's state directory, and its socket,
// listening. The directory is made for a warm daemon and renamed after
// its sandbox when the daemon is claimed.
func (p *Provider) makeStateDir(dir string) (listener *os.File, err error) {
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, err
	}
	name, done, err := shortSocketPath(filepath.Join(dir, socketFile))
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	done()
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	return ln.File()
}

// daemonCommand is how a daemon is started: through a descriptor of its
// binary, with its files, in new namespaces where it is root of its own
// user namespace. It must be started with startOwnedBy(owner).
func (p *Provider) daemonCommand(owner int, log *os.File, files ...*os.File) *exec.Cmd {
	ids := p.idMap(owner)
	// One P: a command's way through the daemon (request, fork, wait,
	// result) is a chain of hand-offs, each a wake-up of an idle P on a
	// second thread when there are two, and blocking calls (forks, file
	// operations) release the P anyway. BenchmarkExec: median 2.9 → 2.4
	// ms, output, export and import rates unchanged.
	return &exec.Cmd{
		Path:       fdPath(linuxinit.FDExe),
		Args:       []string{linuxinit.Arg0},
		Env:        []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=1"},
		Dir:        "/",
		Stdout:     log,
		Stderr:     log,
		ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
			UidMappings:                ids,
			GidMappings:                ids,
			GidMappingsEnableSetgroups: true,
			// Become root of the new user namespace (the host's root is
			// not mapped in it), and so hold its capabilities.
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
			// A session of its own: signals to the creator's terminal or
			// process group do not reach sandboxes.
			Setsid: true,
		},
	}
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(startTimeout)
}

// daemonError adds what the daemon printed to an error about it.
func daemonError(err error, logPath string) error {
	b, _ := os.ReadFile(logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return err
	}
	return fmt.Errorf("%w; daemon log: %s", err, b)
}

// claim makes a warm daemon the daemon of a new sandbox: it gives the
// daemon's state directory the sandbox's id, sets the sandbox's limits,
// records it, and tells the daemon.
func (p *Provider) claim(ctx context.Context, w *warm, spec provider.Spec) (*record, error) {
	rec := &record{Base: records.NewBase(spec, p.resources(spec.Resources)),
		PID: w.cmd.Process.Pid, PIDStart: w.pidStart, Cgroup: w.cg.paths}
	// A sandbox of the default limits finds them set already.
	if rec.Resources != w.res {
		if err := w.cg.update(rec.Resources, p.cfg.Limits.commandMemory(rec.Resources.Memory)); err != nil {
			return nil, fmt.Errorf("set limits: %w", err)
		}
		w.res = rec.Resources
	}
	// The record goes in first, and one rename publishes the directory
	// with it: Get sees the whole sandbox or none of it, and from here on
	// Destroy finds everything, whatever happens to this process.
	if err := writeRecord(w.record, rec); err != nil {
		return nil, err
	}
	dir := filepath.Join(p.cfg.StateDir, spec.ID)
	if err := os.Rename(w.dir, dir); err != nil {
		return nil, err
	}
	w.dir = dir
	sock := filepath.Join(dir, socketFile)
	w.socket.Store(&sock)
	msg := linuxinit.ClaimMsg{ID: spec.ID, Env: p.sandboxEnv(spec.Env), Dir: spec.Dir, ExpiresAt: rec.ExpiresAt, Lease: rec.Lease,
		UserProcesses: p.cfg.Limits.userProcesses(rec.Resources.Pids)}
	if err := sendJSON(w.ctl, msg, nil); err != nil {
		return nil, fmt.Errorf("claim daemon: %w", err)
	}
	// The daemon now belongs to the sandbox. Its answer is not waited
	// for: it applies the claim before it runs any command (commands
	// wait for it), and a daemon that fails to apply it exits, which
	// makes the sandbox lost. Reap it if it exits while this process
	// lives; it is not killed when this process exits.
	go func() {
		if err := recvReply(w.ctl, linuxinit.ReplyReady, time.Now().Add(startTimeout)); err != nil {
			p.log.Warn("claim of a sandbox's daemon", "id", spec.ID, "err", daemonError(err, filepath.Join(dir, logFile)))
		}
		w.ctl.Close()
		_ = w.cmd.Wait()
	}()
	p.clients.Adopt(spec.ID, w.client)
	p.holdWorkspace(spec.ID, w.workspace)
	return rec, nil
}

// create makes a sandbox, from a warm daemon of the pool if there is one.
func (p *Provider) create(ctx context.Context, spec provider.Spec) (*record, error) {
	if spec.Image != "" {
		root, err := p.images.RootFS(ctx, spec.Image)
		if err != nil {
			return nil, err
		}
		spec.RootFS = root
	}
	res := p.resources(spec.Resources)
	var w *warm
	// Warm daemons have /tmp sized for the default memory limit, and a
	// workspace of the default size.
	if res.Memory == p.cfg.Defaults.Memory {
		w = p.takeWarm(spec.RootFS, res.Disk)
	}
	if w == nil {
		var err error
		if w, err = p.startWarm(ctx, spec.RootFS, res.Memory, res.Disk); err != nil {
			return nil, err
		}
	}
	rec, err := p.claim(ctx, w, spec)
	if err != nil {
		w.kill()
		return nil, err
	}
	return rec, nil
}

func (p *Provider) resources(r provider.Resources) provider.Resources {
	return settings.Fill(r, p.cfg.Defaults)
}

// cleanup is a LIFO list of undo steps for work that fails half way.
type cleanup []func()

func (c *cleanup) add(f func()) { *c = append(*c, f) }
func (c *cleanup) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// killDaemon kills a sandbox's daemon, and with it, as the first process
// of the sandbox's PID namespace, every process in the sandbox; it
// returns when the daemon is gone.
func killDaemon(ctx context.Context, pid int) error { return hostproc.Kill(ctx, pid, "daemon") }
