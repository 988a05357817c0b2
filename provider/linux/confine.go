package linux

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM in a sandbox: they reach kernel surface
// a command has no use for (modules, keys, BPF, mounting, tracing the
// kernel, clocks, rebooting) and that has held many of the kernel's
// privilege-escalation bugs.
var deniedSyscalls = []string{
	"acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "delete_module",
	"finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "init_module",
	"io_uring_enter", "io_uring_register", "io_uring_setup", "ioperm", "iopl",
	"kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mount",
	"mount_setattr", "move_mount", "name_to_handle_at", "open_by_handle_at",
	"open_tree", "perf_event_open", "pivot_root", "quotactl", "reboot",
	"request_key", "setns", "settimeofday", "swapoff", "swapon", "syslog",
	"umount2", "uselib", "userfaultfd", "vhangup",
}

// confine applies no_new_privs, Landlock and seccomp to the daemon and,
// through inheritance, to every command it starts. It runs after the
// daemon has mounted everything it needs.
func confine() error {
	// Landlock: read and execute everywhere in the sandbox's root, write
	// only where the sandbox may. BestEffort applies what this kernel's
	// Landlock supports, and nothing when it has none.
	err := landlock.V5.BestEffort().RestrictPaths(
		landlock.RODirs("/"),
		// Refer: moving files between directories, which the daemon's
		// atomic writes and imports do.
		landlock.RWDirs("/workspace", "/tmp", "/dev", "/proc").WithRefer(),
	)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}

	eperm := seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	filter := seccomp.Filter{
		NoNewPrivs: true,
		// TSYNC puts every thread of the daemon under the filter (and
		// no_new_privs), not just the calling one.
		Flag: seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{
				{Names: deniedSyscalls, Action: eperm},
				{
					// No new user namespaces: inside one, an unprivileged
					// command would regain every capability.
					NamesWithCondtions: []seccomp.NameWithConditions{
						{Name: "unshare", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
						{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
					},
					Action: eperm,
				},
				{
					// clone3 passes its flags in memory a filter cannot
					// read; ENOSYS makes libc and Go fall back to clone.
					Names:  []string{"clone3"},
					Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS),
				},
			},
		},
	}
	if err := seccomp.LoadFilter(filter); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
