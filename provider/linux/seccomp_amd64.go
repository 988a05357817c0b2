package linux

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

// deniedSyscalls fail with EPERM in a sandbox: they reach kernel surface
// a command has no use for (modules, keys, BPF, mounting, tracing the
// kernel, clocks, rebooting) and that has held many of the kernel's
// privilege-escalation bugs. fanotify is among them: its marks on the
// host's /usr and /etc would show a sandbox what the host and other
// sandboxes open, and its groups are counted against the host's user.
var deniedSyscalls = []uint32{
	unix.SYS_ACCT, unix.SYS_ADD_KEY, unix.SYS_BPF, unix.SYS_CLOCK_ADJTIME, unix.SYS_CLOCK_SETTIME,
	unix.SYS_DELETE_MODULE, unix.SYS_FANOTIFY_INIT, unix.SYS_FANOTIFY_MARK, unix.SYS_FINIT_MODULE, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSOPEN,
	unix.SYS_FSPICK, unix.SYS_INIT_MODULE, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_IO_URING_SETUP, unix.SYS_IOPERM, unix.SYS_IOPL, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_KEXEC_LOAD,
	unix.SYS_KEYCTL, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_MOUNT, unix.SYS_MOUNT_SETATTR, unix.SYS_MOVE_MOUNT,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_OPEN_TREE, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_PIVOT_ROOT, unix.SYS_QUOTACTL, unix.SYS_REBOOT, unix.SYS_REQUEST_KEY, unix.SYS_SETNS,
	unix.SYS_SETTIMEOFDAY, unix.SYS_SWAPOFF, unix.SYS_SWAPON, unix.SYS_SYSLOG, unix.SYS_UMOUNT2,
	unix.SYS_USELIB, unix.SYS_USERFAULTFD, unix.SYS_VHANGUP,
}
