// Package linuxinit is berth's daemon as the first process of a linux
// sandbox: the provider starts berth-sandboxd (or a program that calls
// linux.Main) in new namespaces, which calls [Main]. Told by its host
// over a control socket how to build the sandbox (see [WarmMsg]), it
// sets the sandbox's kernel limits, mounts its root, brings up its
// loopback interface, locks itself down ([Confine]), serves [sandboxd],
// and waits to be claimed by a sandbox ([ClaimMsg]).
//
// It links no host-side code: it runs inside the sandbox. The docker
// provider's daemon uses its [Confine] too.
package linuxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/sandboxd"
)

// Main runs the sandbox daemon when this process was started as one by
// the provider, and then never returns. Otherwise it returns at once.
// berth-sandboxd calls it first thing, as do programs that create linux
// sandboxes and are their own daemon (through linux.Main).
func Main() {
	if len(os.Args) == 0 || os.Args[0] != Arg0 {
		return
	}
	unix.Close(FDExe) // only needed to start
	// Looked for before anything opens a file, which could take its
	// number: it is absent on cgroup v2.
	var cmds *os.File
	if _, err := unix.FcntlInt(FDCmds, unix.F_GETFD, 0); err == nil {
		cmds = os.NewFile(FDCmds, "commands' cgroup")
	}
	// The control socket and the out-of-memory counter are the daemon's
	// alone: no command may inherit them.
	unix.CloseOnExec(FDControl)
	unix.CloseOnExec(FDOOM)
	// Held open until the daemon exits, and with it the lock.
	unix.CloseOnExec(FDOwner)
	unix.CloseOnExec(FDCmds)
	closeInherited()
	ctl := os.NewFile(FDControl, "control")
	if err := runDaemon(ctl, cmds); err != nil {
		_ = Send(ctl, []byte(err.Error()), nil)
		fmt.Fprintf(os.Stderr, "berth-sandboxd: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// closeInherited closes the descriptors this process did not open and
// the provider did not hand over: those its creator held without
// close-on-exec, which exec passes through and which must not reach a
// sandbox. Everything the Go runtime opens has close-on-exec set, so
// that is how strays are told apart; closing by number would close the
// runtime's own.
func closeInherited() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= FDCmds {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// runDaemon is the sandbox's first process. It builds the sandbox's view
// of the world, waits to be claimed, then locks itself down and serves.
// Its commands are born in the cgroup whose tasks file is cmds, if not
// nil.
func runDaemon(ctl *os.File, cmds *os.File) error {
	// A few MiB per sandbox matter more here than collection speed. (A
	// memory limit would be wrong: the runtime counts the globals of a
	// large binary against it, and a limit near them makes it collect
	// without end.)
	debug.SetGCPercent(50)

	var wm WarmMsg
	var lnFile *os.File
	err := recvJSON(ctl, &wm, &lnFile)
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	if lnFile == nil {
		return fmt.Errorf("no listening socket")
	}
	var rootfs *os.File
	if wm.RootFS {
		if rootfs, err = recvFile(ctl, MsgRootFS); err != nil {
			return fmt.Errorf("read root filesystem: %w", err)
		}
		defer rootfs.Close()
	}
	if err := setKernelLimits(wm.Limits); err != nil {
		return fmt.Errorf("kernel limits: %w", err)
	}
	if err := prepareRoot(wm.NewRoot, rootfs, wm.TmpSize, wm.ResolvConf, wm.ProxyCA); err != nil {
		return fmt.Errorf("set up root filesystem: %w", err)
	}
	ws, err := recvFile(ctl, MsgWorkspace)
	if err != nil {
		return fmt.Errorf("read workspace: %w", err)
	}
	err = enterRoot(wm.NewRoot, ws)
	ws.Close()
	if err != nil {
		return fmt.Errorf("enter root filesystem: %w", err)
	}
	if err := unix.Sethostname([]byte("sandbox")); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	if err := Confine(); err != nil {
		return fmt.Errorf("confine: %w", err)
	}
	ln, err := net.FileListener(lnFile)
	if err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	lnFile.Close()
	oom := os.NewFile(FDOOM, "oom")
	var oomMu sync.Mutex
	oomBuf := make([]byte, 4096) // both files are a few lines long
	srv, err := sandboxd.New(sandboxd.Config{
		Workspace: "/workspace",
		UID:       UID,
		GID:       GID,
		Deferred:  true, // configured when claimed
		// The kernel kills commands before the daemon when the sandbox
		// runs out of memory.
		CommandOOMScoreAdj: 1000,
		// The cgroup namespace made with the daemon's other namespaces
		// is rooted at its creator's cgroups (the host moves the daemon
		// into the sandbox's only after): each command gets one rooted
		// at the sandbox's.
		CgroupNamespace: true,
		CommandCgroup:   cmds,
		OOMKills: func() (int64, error) {
			oomMu.Lock()
			defer oomMu.Unlock()
			return readOOMKills(oom, oomBuf)
		},
	})
	if err != nil {
		return err
	}
	// Serving before the claim lets the host open its connection ahead
	// of time; nobody but the host can reach the socket, and it sends
	// nothing else before it claims the daemon.
	if err := srv.WarmUp("/bin/true"); err != nil {
		fmt.Fprintf(os.Stderr, "warm-up command: %v\n", err) // the sandbox's root may have no /bin/true
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if err := Send(ctl, []byte(ReplyWarm), nil); err != nil {
		return err
	}

	var cm ClaimMsg
	if err := recvJSON(ctl, &cm, nil); err != nil {
		if err == errClosed {
			os.Exit(0) // the host went away before it needed us
		}
		return fmt.Errorf("read claim: %w", err)
	}
	if err := setUserProcesses(cm.UserProcesses); err != nil {
		return fmt.Errorf("process limit: %w", err)
	}
	srv.SetLease(cm.Lease)
	// The hard lifetime: when it ends the daemon exits, and being the
	// first process of the PID namespace, takes every process with it.
	time.AfterFunc(time.Until(cm.ExpiresAt), func() { os.Exit(0) })
	// Last: commands wait for it, and the host sends them without
	// waiting for the reply, so they must find every bound in place.
	srv.Configure(cm.Env, cm.Dir)
	// The host need not be there to hear it: one that created the
	// sandbox and exited closed its end, and the sandbox lives on.
	_ = Send(ctl, []byte(ReplyReady), nil)
	ctl.Close()
	return <-served
}

var errClosed = errors.New("control socket closed")

// recvJSON reads one control message into v, and the descriptor that
// came with it into f, if f is not nil.
func recvJSON(ctl *os.File, v any, f **os.File) error {
	msg, file, err := Recv(ctl)
	if err != nil {
		return err
	}
	if f != nil {
		*f = file
	} else if file != nil {
		file.Close()
	}
	if len(msg) == 0 {
		return errClosed
	}
	return json.Unmarshal(msg, v)
}

// recvFile reads a message name that carries a descriptor.
func recvFile(ctl *os.File, name string) (*os.File, error) {
	msg, f, err := Recv(ctl)
	switch {
	case err != nil:
		return nil, err
	case string(msg) != name || f == nil:
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("got %.100q, want %s with a descriptor", msg, name)
	}
	return f, nil
}

// readOOMKills reads the oom_kill count from the cgroup file the
// provider passed as FDOOM (memory.events, or memory.oom_control on
// cgroup v1). It is read twice for every command: one pread into a
// buffer of the caller's, rather than a seek, reads and a scanner's
// buffer of its own.
func readOOMKills(f *os.File, buf []byte) (int64, error) {
	n, err := unix.Pread(int(f.Fd()), buf, 0)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(buf[:n])) {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, nil
}

// loopbackUp brings up the sandbox's own loopback interface, its only
// network.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
