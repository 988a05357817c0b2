package linuxinit

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestSeccompFilter runs the filter, as the kernel would, on calls of
// this machine's architecture and of another: what it denies, what it
// lets through, and that a call through a foreign ABI is killed (it
// would bypass the numbers checked).
func TestSeccompFilter(t *testing.T) {
	raw, err := seccompFilter(auditArch, deniedSyscalls)
	if err != nil {
		t.Fatal(err)
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the filter does not disassemble")
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	run := func(arch, nr uint32, args ...uint64) uint32 {
		// struct seccomp_data: nr, arch, instruction_pointer, args[6].
		// The kernel loads its words in the machine's order, this VM in
		// network order: each word the filter reads is written so.
		data := make([]byte, 64)
		binary.BigEndian.PutUint32(data[seccompNR:], nr)
		binary.BigEndian.PutUint32(data[seccompArchOff:], arch)
		for i, a := range args {
			binary.BigEndian.PutUint32(data[seccompArg0Lo+8*i:], uint32(a))
		}
		got, err := vm.Run(data)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(got)
	}
	const (
		allow = unix.SECCOMP_RET_ALLOW
		kill  = unix.SECCOMP_RET_KILL_PROCESS
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	)
	for _, nr := range deniedSyscalls {
		if got := run(auditArch, nr); got != eperm {
			t.Errorf("denied call %d: filter says %#x, want EPERM", nr, got)
		}
	}
	for _, nr := range []uint32{unix.SYS_GETPID, unix.SYS_READ, unix.SYS_OPENAT, unix.SYS_EXECVE} {
		if got := run(auditArch, nr); got != allow {
			t.Errorf("call %d: filter says %#x, want it allowed", nr, got)
		}
	}
	if got := run(auditArch, unix.SYS_CLONE3); got != unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS) {
		t.Errorf("clone3: filter says %#x, want ENOSYS", got)
	}
	if got := run(auditArch, unix.SYS_UNSHARE, unix.CLONE_NEWUSER); got != eperm {
		t.Errorf("unshare(CLONE_NEWUSER): filter says %#x, want EPERM", got)
	}
	if got := run(auditArch, unix.SYS_SOCKET, unix.AF_PACKET); got != unix.SECCOMP_RET_ERRNO|uint32(unix.EAFNOSUPPORT) {
		t.Errorf("socket(AF_PACKET): filter says %#x, want EAFNOSUPPORT", got)
	}
	if got := run(auditArch, unix.SYS_SOCKET, unix.AF_INET); got != allow {
		t.Errorf("socket(AF_INET): filter says %#x, want it allowed", got)
	}
	for _, arch := range []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM} {
		if arch == auditArch {
			continue
		}
		if got := run(arch, unix.SYS_GETPID); got != kill {
			t.Errorf("a call of architecture %#x: filter says %#x, want the process killed", arch, got)
		}
	}
}
