package remoteinit

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// allowedFamilies are the socket address families commands may use, as
// in berth's other sandboxes. The others reach kernel surface a command
// has no use for: AF_VSOCK the hypervisor that runs a hosted machine,
// AF_ALG the kernel's crypto, AF_PACKET, AF_BLUETOOTH, AF_CAN, AF_XDP...
// They fail with EAFNOSUPPORT, as on a kernel built without them.
var allowedFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// confine refuses the other families to the daemon and, through
// inheritance, to every command, with a seccomp filter. The kernel
// requires no_new_privs of a process without CAP_SYS_ADMIN, and berth's
// sandbox user gains no privilege anyway: no setuid program (sudo)
// works for commands. On an architecture it does not know it does
// nothing.
func confine() error {
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = unix.AUDIT_ARCH_X86_64
	case "arm64":
		arch = unix.AUDIT_ARCH_AARCH64
	default:
		return nil
	}
	filter := socketFilter(arch, runtime.GOARCH == "amd64")
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// TSYNC: every thread of the daemon, and so every command it forks.
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}

// socketFilter is the filter: a call of another architecture's ABI is
// killed (it would bypass the numbers checked), socket and socketpair
// of a family not allowed fail, anything else runs.
func socketFilter(arch uint32, x32 bool) []unix.SockFilter {
	const (
		kill  = unix.SECCOMP_RET_KILL_PROCESS
		allow = unix.SECCOMP_RET_ALLOW
		eafno = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
		// Offsets into struct seccomp_data.
		nrOff, archOff, arg0Lo = 0, 4, 16
	)
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }

	f := []unix.SockFilter{ld(archOff), jeq(arch, 1, 0), ret(kill), ld(nrOff)}
	if x32 {
		// x32 calls reach the same kernel through numbers with this bit.
		f = append(f, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: 0, Jf: 1, K: 0x40000000}, ret(kill))
	}
	n := uint8(len(allowedFamilies))
	// socket or socketpair go on to the family; the rest to allow, past
	// the family's load, its n checks and the refusal.
	f = append(f, jeq(unix.SYS_SOCKET, 1, 0), jeq(unix.SYS_SOCKETPAIR, 0, n+2), ld(arg0Lo))
	for i := range n {
		f = append(f, jeq(allowedFamilies[i], n-i, 0))
	}
	return append(f, ret(eafno), ret(allow))
}
