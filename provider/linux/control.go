package linux

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A daemon starts with a control socket to its host (a SOCK_SEQPACKET
// pair, so each message arrives whole). The conversation is:
//
//	host:   warmMsg + socket   how to build the root, and its listener
//	host:   "workspace" + fd   the workspace's mount (see makeWorkspace)
//	daemon: "warm"             namespaces, cgroups, root, confinement ready
//	host:   claimMsg           whose sandbox it now is
//	daemon: "ready"            it serves; or, instead, why it cannot
//
// Between "warm" and the claim the daemon waits in a pool; if the host
// goes away first, the socket closes and the daemon exits.

// warmMsg is what a starting daemon needs to build its root.
type warmMsg struct {
	// NewRoot is a directory, reachable from the daemon, to mount the
	// sandbox's root on (each daemon mounts it in its own namespace).
	NewRoot string `json:"new_root"`
	// RootFS says that the sandbox has a root filesystem of its own,
	// whose directory comes next, by descriptor, with msgRootFS; false
	// means the host's. The daemon, which runs as a host uid of its
	// own, reaches it by no path: the image cache is root's alone.
	RootFS bool `json:"rootfs,omitempty"`
	// Limits are the kernel limits the daemon sets before anything of
	// the sandbox runs.
	Limits KernelLimits `json:"limits"`
	// TmpSize is the size of /tmp and of /dev/shm, in bytes.
	TmpSize int64 `json:"tmp_size"`
}

// msgWorkspace comes with the workspace's mount. It follows warmMsg on
// its own because the host formats the workspace while the daemon
// builds the rest of its root.
const msgWorkspace = "workspace"

// msgRootFS comes with a descriptor of the root filesystem's directory.
const msgRootFS = "rootfs"

// claimMsg turns a warm daemon into one sandbox's daemon.
type claimMsg struct {
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
	replyWarm  = "warm"
	replyReady = "ready"
)

const maxControlMsg = 1 << 20

// send writes one message, with a file descriptor riding along if f is
// not nil.
func send(ctl *os.File, msg []byte, f *os.File) error {
	var oob []byte
	if f != nil {
		oob = unix.UnixRights(int(f.Fd()))
	}
	return unix.Sendmsg(int(ctl.Fd()), msg, oob, nil, 0)
}

func sendJSON(ctl *os.File, v any, f *os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxControlMsg {
		return fmt.Errorf("control message of %d bytes is too large", len(b))
	}
	return send(ctl, b, f)
}

// recv reads one message and the descriptor that came with it, if any.
// A closed socket reads as an empty message and no error.
func recv(ctl *os.File) ([]byte, *os.File, error) {
	buf := make([]byte, maxControlMsg)
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

// recvReply waits for a daemon's answer until the deadline; an answer
// other than want is the daemon's reason for failing.
func recvReply(ctl *os.File, want string, deadline time.Time) error {
	if err := waitReadable(ctl, deadline); err != nil {
		return err
	}
	msg, f, err := recv(ctl)
	if f != nil {
		f.Close()
	}
	switch {
	case err != nil:
		return err
	case string(msg) == want:
		return nil
	case len(msg) == 0:
		return fmt.Errorf("daemon exited")
	}
	return fmt.Errorf("daemon: %s", msg)
}

func waitReadable(f *os.File, deadline time.Time) error {
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return fmt.Errorf("daemon did not answer in time")
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}, ms)
		if n > 0 {
			return nil
		}
		if err != nil && err != unix.EINTR {
			return err
		}
	}
}
