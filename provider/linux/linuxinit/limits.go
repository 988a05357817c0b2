package linuxinit

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// userNamespaceLimits are the /proc/sys/user limits the daemon sets in
// its sandbox's user namespace before anything of the sandbox runs. The
// kernel counts these per user and namespace, and also against the owner
// of the namespace in the parent, a host uid of the sandbox's own (see
// the provider's Config.UIDBase): they bound what the sandbox takes of the host's. Namespaces: the sandbox user has no
// capability to make any and the daemon has made its own, but for the
// cgroup namespace it gives each command; fanotify: the
// seccomp filter refuses it, this is a second wall.
func userNamespaceLimits(l Limits) map[string]int64 {
	return map[string]int64{
		"max_inotify_instances": l.InotifyInstances,
		"max_inotify_watches":   l.InotifyWatches,
		"max_fanotify_groups":   0,
		"max_fanotify_marks":    0,
		"max_ipc_namespaces":    0,
		"max_mnt_namespaces":    0,
		"max_net_namespaces":    0,
		"max_pid_namespaces":    0,
		"max_time_namespaces":   0,
		"max_user_namespaces":   0,
		"max_uts_namespaces":    0,
	}
}

// setKernelLimits bounds the daemon's sandbox: the limits of its user
// namespace, and the resource limits every command inherits. It runs as
// root of the namespace, which holds CAP_SYS_RESOURCE there, and after
// the daemon has made the namespaces it needs.
func setKernelLimits(l Limits) error {
	for name, v := range userNamespaceLimits(l) {
		p := "/proc/sys/user/" + name
		if err := os.WriteFile(p, []byte(strconv.FormatInt(v, 10)), 0); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("set %s: %w", p, err)
		}
	}
	for _, r := range []struct {
		res int
		v   int64
	}{
		// syscall.Setrlimit, unlike a raw call, also stops the Go
		// runtime from restoring its own start-up RLIMIT_NOFILE in
		// the children it forks.
		{unix.RLIMIT_NOFILE, l.OpenFiles},
		{unix.RLIMIT_SIGPENDING, l.PendingSignals},
		// POSIX message queues: counted against the namespace's
		// owner like signals, and of no use to a sandbox.
		{unix.RLIMIT_MSGQUEUE, 0},
	} {
		lim := syscall.Rlimit{Cur: uint64(r.v), Max: uint64(r.v)}
		if err := syscall.Setrlimit(r.res, &lim); err != nil {
			return fmt.Errorf("setrlimit %d: %w", r.res, err)
		}
	}
	return nil
}

// setUserProcesses sets RLIMIT_NPROC, which the kernel applies to the
// processes and threads of each user in the namespace apart: the sandbox
// user's commands are held to n, and the daemon, another user, keeps the
// rest of the sandbox's process limit.
func setUserProcesses(n int64) error {
	lim := syscall.Rlimit{Cur: uint64(n), Max: uint64(n)}
	return syscall.Setrlimit(unix.RLIMIT_NPROC, &lim)
}
