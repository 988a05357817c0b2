package linux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

// daemonArg0 is the name the daemon is started under; Main looks for it.
const daemonArg0 = "berth-sandboxd"

// daemonConfig is what the host tells a starting daemon, on a pipe.
type daemonConfig struct {
	ID        string            `json:"id"`
	Env       map[string]string `json:"env"`
	Dir       string            `json:"dir"`
	Workspace string            `json:"workspace"` // host path of the workspace
	RootFS    string            `json:"rootfs,omitempty"`
	ExpiresAt time.Time         `json:"expires_at"`
	TmpSize   int64             `json:"tmp_size"`
}

// The files a daemon starts with, after stdin, stdout and stderr.
const (
	fdConfig   = 3 + iota // read end of the config pipe
	fdStatus              // write end of the status pipe
	fdListener            // the listening socket
	fdOOM                 // the cgroup file counting out-of-memory kills
	fdExe                 // the daemon's own binary
)

// statusReady is what a daemon writes when it serves; anything else it
// writes is why it could not.
const statusReady = "ready\n"

// cleanup is a LIFO list of undo steps for a creation that fails half way.
type cleanup []func()

func (c *cleanup) add(f func()) { *c = append(*c, f) }
func (c *cleanup) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// create makes the sandbox: state directory, daemon, cgroups, record.
func (p *Provider) create(ctx context.Context, spec provider.Spec) (rec *record, err error) {
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	id := spec.ID
	dir := filepath.Join(p.cfg.StateDir, id)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, err
	}
	undo.add(func() { os.RemoveAll(dir) })
	ws := filepath.Join(dir, workspaceDir)
	if err := os.Mkdir(ws, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chown(ws, p.cfg.UIDBase+sandboxUID, p.cfg.UIDBase+sandboxGID); err != nil {
		return nil, err
	}

	now := time.Now()
	lifetime := spec.Lifetime
	if lifetime == 0 {
		lifetime = provider.DefaultLifetime
	}
	rec = &record{ID: id, Labels: spec.Labels, Resources: p.resources(spec.Resources),
		CreatedAt: now.UTC(), ExpiresAt: now.Add(lifetime).UTC()}
	if rec.Cgroup, err = pathsFor(id); err != nil {
		return nil, err
	}
	cg, err := newCgroup(rec.Cgroup, rec.Resources)
	if err != nil {
		return nil, err
	}
	undo.add(func() { cg.destroy(context.WithoutCancel(ctx)) })

	cmd, status, err := p.startDaemon(dir, spec, rec, cg)
	if err != nil {
		return nil, err
	}
	undo.add(func() { cmd.Process.Kill() })
	// The daemon sets up its root while it is put in its cgroups; it runs
	// no command before it says it is ready, so the limits hold for all.
	if err := cg.add(cmd.Process.Pid); err != nil {
		return nil, fmt.Errorf("put daemon in its cgroups: %w", err)
	}
	if err := waitReady(ctx, status, filepath.Join(dir, logFile)); err != nil {
		return nil, err
	}
	rec.PID = cmd.Process.Pid
	if rec.PIDStart, err = processStart(rec.PID); err != nil {
		return nil, fmt.Errorf("daemon exited: %w", err)
	}
	// Reap the daemon if it dies while this process lives; it is not
	// killed when this process exits.
	go cmd.Wait()
	if err := writeRecord(dir, rec); err != nil {
		return nil, err
	}
	return rec, nil
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
	return r
}

// startDaemon starts the daemon in its new namespaces and hands it its
// configuration. It returns the read end of the daemon's status pipe.
func (p *Provider) startDaemon(dir string, spec provider.Spec, rec *record, cg *cgroup) (*exec.Cmd, *os.File, error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	files = append(files, cfgR)
	statusR, statusW, err := os.Pipe()
	if err != nil {
		cfgW.Close()
		return nil, nil, err
	}
	files = append(files, statusW)

	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, socketFile), Net: "unix"})
	if err != nil {
		cfgW.Close()
		statusR.Close()
		return nil, nil, err
	}
	ln.SetUnlinkOnClose(false)
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		cfgW.Close()
		statusR.Close()
		return nil, nil, err
	}
	files = append(files, lnFile)

	oom, err := cg.oomFile()
	if err != nil {
		cfgW.Close()
		statusR.Close()
		return nil, nil, fmt.Errorf("open out-of-memory counter: %w", err)
	}
	files = append(files, oom)
	// The daemon is executed through a descriptor the host opened: its
	// path may be in directories the sandbox's ids cannot traverse.
	exe, err := os.OpenFile(p.cfg.DaemonPath, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		cfgW.Close()
		statusR.Close()
		return nil, nil, fmt.Errorf("open daemon binary: %w", err)
	}
	files = append(files, exe)
	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		cfgW.Close()
		statusR.Close()
		return nil, nil, err
	}
	files = append(files, logf)

	base := uint32(p.cfg.UIDBase)
	cmd := &exec.Cmd{
		Path:       fdPath(fdExe),
		Args:       []string{daemonArg0},
		Env:        []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=2", "GOGC=50"},
		Dir:        "/",
		Stdout:     logf,
		Stderr:     logf,
		ExtraFiles: files[:len(files)-1],
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: idRange}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: idRange}},
			GidMappingsEnableSetgroups: true,
			// Become root of the new user namespace (the host's root is
			// not mapped in it), and so hold its capabilities.
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
			// A session of its own: signals to the creator's terminal or
			// process group do not reach sandboxes.
			Setsid: true,
		},
	}
	if err := cmd.Start(); err != nil {
		cfgW.Close()
		statusR.Close()
		return nil, nil, fmt.Errorf("start daemon: %w", err)
	}
	dc := daemonConfig{ID: rec.ID, Env: env(spec.Env), Dir: spec.Dir, RootFS: spec.RootFS,
		Workspace: filepath.Join(dir, workspaceDir),
		ExpiresAt: rec.ExpiresAt, TmpSize: rec.Resources.Memory}
	go func() {
		// Written after the start: the config may not fit in a pipe.
		_ = json.NewEncoder(cfgW).Encode(dc)
		cfgW.Close()
	}()
	return cmd, statusR, nil
}

// waitReady waits for the daemon's word, or its death.
func waitReady(ctx context.Context, status *os.File, logPath string) error {
	defer status.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = status.SetReadDeadline(d)
	} else {
		_ = status.SetReadDeadline(time.Now().Add(30 * time.Second))
	}
	b, err := io.ReadAll(io.LimitReader(status, 4096))
	msg := string(b)
	switch {
	case msg == statusReady:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("daemon did not start in time")
	case msg != "":
		return fmt.Errorf("daemon: %s", strings.TrimSpace(msg))
	}
	logTail, _ := os.ReadFile(logPath)
	if len(logTail) > 2000 {
		logTail = logTail[len(logTail)-2000:]
	}
	return fmt.Errorf("daemon exited before it was ready: %s", strings.TrimSpace(string(logTail)))
}

// killDaemon kills a sandbox's daemon, and with it, as the first process
// of the sandbox's PID namespace, every process in the sandbox; it
// returns when the daemon is gone.
func killDaemon(ctx context.Context, pid int) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill daemon %d: %w", pid, err)
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
			return fmt.Errorf("daemon %d did not exit: %w", pid, ctx.Err())
		}
	}
}
