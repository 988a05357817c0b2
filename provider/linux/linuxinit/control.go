package linuxinit

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Arg0 is the name the provider starts the daemon under; Main looks for
// it.
const Arg0 = "berth-sandboxd"

// The files a daemon starts with, after stdin, stdout and stderr.
const (
	FDControl = 3 + iota // the control socket
	FDOOM                // the cgroup file counting out-of-memory kills
	FDExe                // the daemon's own binary, to start it
	FDOwner              // the lock on its user namespace's owner uid
	FDCmds               // the tasks file of its commands' cgroup, if any
)

// Identities inside a sandbox.
const (
	UID = 1000 // the unprivileged user commands run as
	GID = 1000
)

// A daemon starts with a control socket to its host (a SOCK_SEQPACKET
// pair, so each message arrives whole). The conversation is:
//
//	host:   WarmMsg + socket   how to build the root, and its listener
//	host:   "rootfs" + fd      the root filesystem's directory, if any
//	host:   "workspace" + fd   the workspace's mount
//	daemon: "warm"             namespaces, cgroups, root, confinement ready
//	host:   ClaimMsg           whose sandbox it now is
//	daemon: "ready"            it serves; or, instead, why it cannot
//
// Between "warm" and the claim the daemon waits in a pool; if the host
// goes away first, the socket closes and the daemon exits.

// WarmMsg is what a starting daemon needs to build its root.
type WarmMsg struct {
	// NewRoot is a directory, reachable from the daemon, to mount the
	// sandbox's root on (each daemon mounts it in its own namespace).
	NewRoot string `json:"new_root"`
	// RootFS says that the sandbox has a root filesystem of its own,
	// whose directory comes next, by descriptor, with MsgRootFS; false
	// means the host's. The daemon, which runs as a host uid of its
	// own, reaches it by no path: the image cache is root's alone.
	RootFS bool `json:"rootfs,omitempty"`
	// Limits are the kernel limits the daemon sets before anything of
	// the sandbox runs.
	Limits Limits `json:"limits"`
	// TmpSize is the size of /tmp and of /dev/shm, in bytes.
	TmpSize int64 `json:"tmp_size"`
	// ResolvConf, if not empty, is the sandbox's /etc/resolv.conf (on
	// the host's root, where the host's is a regular file): the DNS stub
	// of the provider's network, instead of the host's resolvers.
	ResolvConf string `json:"resolv_conf,omitempty"`
	// ProxyCA, if not empty, is the egress proxy's authority (PEM),
	// which the sandbox is to trust for the hosts whose HTTPS the proxy
	// terminates to add a credential: the daemon writes CABundle (the
	// root's system bundle and it) and ProxyCA. It is public.
	ProxyCA string `json:"proxy_ca,omitempty"`
}

// Limits are the per-user kernel limits a daemon sets in its sandbox:
// the provider's KernelLimits, with its defaults applied.
type Limits struct {
	OpenFiles        int64 `json:"open_files"`        // RLIMIT_NOFILE
	PendingSignals   int64 `json:"pending_signals"`   // RLIMIT_SIGPENDING
	InotifyInstances int64 `json:"inotify_instances"` // max_inotify_instances
	InotifyWatches   int64 `json:"inotify_watches"`   // max_inotify_watches
}

// MsgWorkspace comes with the workspace's mount. It follows WarmMsg on
// its own because the host formats the workspace while the daemon
// builds the rest of its root.
const MsgWorkspace = "workspace"

// MsgRootFS comes with a descriptor of the root filesystem's directory.
const MsgRootFS = "rootfs"

// ClaimMsg turns a warm daemon into one sandbox's daemon.
type ClaimMsg struct {
	ID        string            `json:"id"`
	Env       map[string]string `json:"env"`
	Dir       string            `json:"dir,omitempty"`
	ExpiresAt time.Time         `json:"expires_at"`
	// Lease is Spec.Lease: see sandboxd.Server.SetLease.
	Lease time.Duration `json:"lease,omitempty"`
	// UserProcesses is the sandbox user's RLIMIT_NPROC.
	UserProcesses int64 `json:"user_processes"`
}

// The daemon's answers.
const (
	ReplyWarm  = "warm"
	ReplyReady = "ready"
)

// MaxControlMsg bounds a control message.
const MaxControlMsg = 1 << 20

// Send writes one message, with a file descriptor riding along if f is
// not nil.
func Send(ctl *os.File, msg []byte, f *os.File) error {
	var oob []byte
	if f != nil {
		oob = unix.UnixRights(int(f.Fd()))
	}
	return unix.Sendmsg(int(ctl.Fd()), msg, oob, nil, 0)
}

// Recv reads one message and the descriptor that came with it, if any.
// A closed socket reads as an empty message and no error.
func Recv(ctl *os.File) ([]byte, *os.File, error) {
	buf := make([]byte, MaxControlMsg)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(ctl.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, nil, err
	}
	var f *os.File
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, err
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				return nil, nil, err
			}
			for i, fd := range fds {
				if i == 0 && f == nil {
					f = os.NewFile(uintptr(fd), "passed")
				} else {
					unix.Close(fd)
				}
			}
		}
	}
	return buf[:n], f, nil
}
