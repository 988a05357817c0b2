package linuxinit

import (
	"fmt"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Offsets into struct seccomp_data, which a filter reads.
const (
	seccompNR      = 0
	seccompArchOff = 4
	seccompArg0Lo  = 16 // the low half on little-endian machines
	seccompArg2Lo  = 32
)

// deniedSyscalls fail with EPERM in a sandbox: they reach kernel surface
// a command has no use for (modules, keys, BPF, mounting, tracing the
// kernel, clocks, rebooting) and that has held many of the kernel's
// privilege-escalation bugs. fanotify is among them: its marks on the
// host's /usr and /etc would show a sandbox what the host and other
// sandboxes open, and its groups are counted against the host's user.
// Each architecture adds the calls only it has (archDenied).
var deniedSyscalls = append([]uint32{
	unix.SYS_ACCT, unix.SYS_ADD_KEY, unix.SYS_BPF, unix.SYS_CLOCK_ADJTIME, unix.SYS_CLOCK_SETTIME,
	unix.SYS_DELETE_MODULE, unix.SYS_FANOTIFY_INIT, unix.SYS_FANOTIFY_MARK, unix.SYS_FINIT_MODULE, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSOPEN,
	unix.SYS_FSPICK, unix.SYS_INIT_MODULE, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_IO_URING_SETUP, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_KEXEC_LOAD,
	unix.SYS_KEYCTL, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_MOUNT, unix.SYS_MOUNT_SETATTR, unix.SYS_MOVE_MOUNT,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_OPEN_TREE, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_PIVOT_ROOT, unix.SYS_QUOTACTL, unix.SYS_REBOOT, unix.SYS_REQUEST_KEY, unix.SYS_SETNS,
	unix.SYS_SETTIMEOFDAY, unix.SYS_SWAPOFF, unix.SYS_SWAPON, unix.SYS_SYSLOG, unix.SYS_UMOUNT2,
	unix.SYS_USERFAULTFD, unix.SYS_VHANGUP,
}, archDenied...)

// allowedFamilies are the socket address families a sandbox may use: a
// network namespace isolates these, and they are all a command needs
// (netlink for tools that list interfaces and routes). The others reach
// shared kernel surface (AF_VSOCK the hypervisor, AF_ALG the kernel's
// crypto, AF_PACKET, AF_BLUETOOTH, AF_CAN, ...) and fail with
// EAFNOSUPPORT, as on a kernel built without them.
var allowedFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// inotifyReadEvents are the inotify events that report reads. The host's
// /usr and /etc are bound into every sandbox, so a watch for them there
// would see what the host and the other sandboxes open; watches for
// changes see only what the sandbox itself can change, or the host's
// package updates.
const inotifyReadEvents = unix.IN_ACCESS | unix.IN_OPEN | unix.IN_CLOSE_NOWRITE

// seccompFilter assembles the sandbox's filter: syscalls in denied fail
// with EPERM, clone3 with ENOSYS (its flags live in memory a filter cannot
// read, and ENOSYS makes libc and Go fall back to clone, which it can),
// unshare and clone with CLONE_NEWUSER with EPERM, socket and socketpair
// for a family not in allowedFamilies with EAFNOSUPPORT,
// inotify_add_watch for any of inotifyReadEvents with EPERM, anything
// else runs. A
// call from another architecture's ABI is killed: it would bypass the
// numbers checked here.
func seccompFilter(arch uint32, denied []uint32) ([]bpf.RawInstruction, error) {
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		kill   = unix.SECCOMP_RET_KILL_PROCESS
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		eafno  = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
	)
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompArchOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: arch, SkipTrue: 1},
		bpf.RetConstant{Val: kill},
		bpf.LoadAbsolute{Off: seccompNR, Size: 4},
	}
	// x32 calls reach the same kernel through different numbers.
	if arch == unix.AUDIT_ARCH_X86_64 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpLessThan, Val: 0x40000000, SkipTrue: 1},
			bpf.RetConstant{Val: kill})
	}
	for _, nr := range denied {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: nr, SkipTrue: 1},
			bpf.RetConstant{Val: eperm})
	}
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_CLONE3, SkipTrue: 1},
		bpf.RetConstant{Val: enosys},
	)
	for _, nr := range []uint32{unix.SYS_UNSHARE, unix.SYS_CLONE} {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: nr, SkipTrue: 4},
			bpf.LoadAbsolute{Off: seccompArg0Lo, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_NEWUSER, SkipFalse: 1},
			bpf.RetConstant{Val: eperm},
			bpf.LoadAbsolute{Off: seccompNR, Size: 4},
		)
	}
	// Each block below starts and ends with the syscall number loaded.
	for _, nr := range []uint32{unix.SYS_SOCKET, unix.SYS_SOCKETPAIR} {
		n := uint8(len(allowedFamilies))
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: nr, SkipTrue: n + 3},
			bpf.LoadAbsolute{Off: seccompArg0Lo, Size: 4})
		for i, fam := range allowedFamilies {
			// On a match, skip to the reload past the refusal.
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: fam, SkipTrue: n - uint8(i)})
		}
		prog = append(prog,
			bpf.RetConstant{Val: eafno},
			bpf.LoadAbsolute{Off: seccompNR, Size: 4})
	}
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_INOTIFY_ADD_WATCH, SkipTrue: 4},
		bpf.LoadAbsolute{Off: seccompArg2Lo, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: inotifyReadEvents, SkipFalse: 1},
		bpf.RetConstant{Val: eperm},
		bpf.LoadAbsolute{Off: seccompNR, Size: 4},
	)
	prog = append(prog, bpf.RetConstant{Val: allow})
	return bpf.Assemble(prog)
}

// loadSeccomp installs a filter on every thread of the process, setting
// no_new_privs first, as the kernel requires of a process without
// CAP_SYS_ADMIN in its initial user namespace. TSYNC carries both the
// filter and no_new_privs to all threads.
func loadSeccomp(raw []bpf.RawInstruction) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
