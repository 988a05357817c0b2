package linux

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// The kernel charges what the users of a user namespace take of its
// per-user counters (inotify instances and watches, fanotify groups,
// pending signals, message queue bytes, namespaces) to them in the
// namespace, and also, in the parent namespace, to the namespace's owner:
// the effective uid of the process that created it. Created by the
// host's root, every sandbox would draw on root's share, and a few
// sandboxes at their own limits would leave root and each other none.
// So each sandbox's user namespace is owned by a host uid of its own,
// which nothing on the host runs as: its use is charged to that uid,
// bounded by the limits set inside the namespace, and noticed by no one
// else.

// ownersFile, beside the sandboxes, holds one byte-range lock per owner
// uid in use: see allocOwner.
const ownersFile = ".owners"

// maxOwners is how many owner uids there are: UIDBase+idRange up to
// UIDBase+2*idRange-1, the range after the one sandboxes' ids map to.
const maxOwners = idRange

// allocOwner picks a host uid to own a new sandbox's user namespace,
// unused by every other sandbox of any process on the host sharing the
// state directory. The uid is taken by an open file description lock on
// its byte of ownersFile; the lock lives as long as the returned file,
// which the sandbox's daemon keeps open: it is released when the daemon
// exits, however it exits, and no record of it needs cleaning up.
func (p *Provider) allocOwner() (uid int, lock *os.File, err error) {
	f, err := os.OpenFile(filepath.Join(p.cfg.StateDir, ownersFile), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, nil, fmt.Errorf("owner uids: %w", err)
	}
	// Start at a random slot: the slots in use are mostly the first ones,
	// and probing them all for each sandbox would cost a system call per
	// live sandbox.
	start := rand.IntN(maxOwners)
	for i := range maxOwners {
		slot := (start + i) % maxOwners
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(slot), Len: 1}
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		if err == nil {
			return p.cfg.UIDBase + idRange + slot, f, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return 0, nil, fmt.Errorf("owner uids: lock: %w", err)
		}
	}
	f.Close()
	return 0, nil, fmt.Errorf("owner uids: all %d in use", maxOwners)
}

// secbitNoSetuidFixup keeps a thread's capabilities when its uids change
// (linux/securebits.h).
const secbitNoSetuidFixup = 1 << 2

// startOwnedBy starts cmd, which makes a user namespace, so that the
// namespace is owned by host uid owner.
//
// The kernel takes the owner from the creating thread's effective uid,
// and credentials are per thread: one OS thread, locked to one goroutine,
// takes owner as its effective uid while keeping the capabilities it
// needs to create the namespaces and write the new process's uid and gid
// maps (SECBIT_NO_SETUID_FIXUP), forks from there, and takes its own
// credentials back. The raw system calls change that thread alone; Go's
// syscall.Setresuid would change every thread of the process. Should
// taking them back fail, the goroutine ends locked, and the runtime ends
// the thread (or parks it for good if it is the main thread) rather than
// run other goroutines with its credentials. A helper process would do
// the same at the cost of an exec per daemon.
func startOwnedBy(cmd *exec.Cmd, owner int) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
		if err != nil {
			errc <- fmt.Errorf("read securebits: %w", err)
			return
		}
		errc <- startAs(cmd, owner, bits)
		// Back to host root, which the thread still is in every other
		// way: its real and saved uids, and its capabilities, were kept.
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keepID, 0, keepID); e != 0 {
			return
		}
		if unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0) != nil {
			return
		}
		runtime.UnlockOSThread()
	}()
	return <-errc
}

// keepID, as an argument to setresuid, leaves that id as it is.
const keepID = ^uintptr(0)

// startAs starts cmd with the calling thread's effective uid set to
// owner; it leaves the thread so.
func startAs(cmd *exec.Cmd, owner, securebits int) error {
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(securebits|secbitNoSetuidFixup), 0, 0, 0); err != nil {
		return fmt.Errorf("keep capabilities across uid changes: %w", err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keepID, uintptr(owner), keepID); e != 0 {
		return fmt.Errorf("take owner uid %d: %w", owner, e)
	}
	return cmd.Start()
}

// idMap is the id mapping of the user namespace of a sandbox whose
// namespace owner is owner. Its root, the daemon, is owner on the host:
// a host uid of its own, which no other sandbox's daemon shares, so that
// whoever took one daemon's uid could signal no other. The other ids,
// the sandbox user's among them, are UIDBase+id, as an image's files
// are stored (see Config.ImageDir); a sandbox's image is mounted with
// its files of UIDBase shown as owner, its root's (see imageIDMap).
func (p *Provider) idMap(owner int) []syscall.SysProcIDMap {
	return []syscall.SysProcIDMap{
		{ContainerID: 0, HostID: owner, Size: 1},
		{ContainerID: 1, HostID: p.cfg.UIDBase + 1, Size: idRange - 1},
	}
}

// imageIDMap returns a user namespace, open, whose mapping takes the
// ids of an image's files as the cache stores them (from UIDBase) to
// the host ids the sandbox whose namespace owner is owner sees them as:
// UIDBase to owner, its root; the others as they are. A root filesystem
// mounted with it as its id mapping (MOUNT_ATTR_IDMAP) is owned in the
// sandbox as the image says.
//
// The kernel makes a user namespace only with a process in it: a child
// of the daemon's binary is made in one, stopped by ptrace before it
// runs anything, and killed once its namespace is open. ptrace's tracer
// is a thread, hence the lock.
func (p *Provider) imageIDMap(owner int) (*os.File, error) {
	base := p.cfg.UIDBase
	ids := []syscall.SysProcIDMap{
		{ContainerID: base, HostID: owner, Size: 1},
		{ContainerID: base + 1, HostID: base + 1, Size: idRange - 1},
	}
	cmd := &exec.Cmd{
		Path: p.cfg.DaemonPath,
		Args: []string{"berth-idmap"},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: ids,
			GidMappings: ids,
			Ptrace:      true,
		},
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("image id mapping: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		return nil, fmt.Errorf("image id mapping: %w", err)
	}
	return f, nil
}
