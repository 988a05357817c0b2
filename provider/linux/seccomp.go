package linux

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
)

// seccompFilter assembles the sandbox's filter: syscalls in denied fail
// with EPERM, clone3 with ENOSYS (its flags live in memory a filter cannot
// read, and ENOSYS makes libc and Go fall back to clone, which it can),
// unshare and clone with CLONE_NEWUSER with EPERM, anything else runs. A
// call from another architecture's ABI is killed: it would bypass the
// numbers checked here.
func seccompFilter(arch uint32, denied []uint32) ([]bpf.RawInstruction, error) {
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		kill   = unix.SECCOMP_RET_KILL_PROCESS
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
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
