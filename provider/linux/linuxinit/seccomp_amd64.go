package linuxinit

import "golang.org/x/sys/unix"

// auditArch is the architecture whose calls a sandbox may make: x86-64
// (the filter also refuses the x32 ABI's numbers).
const auditArch = unix.AUDIT_ARCH_X86_64

// archDenied are the denied calls only x86-64 has: port I/O, and uselib
// (loading a library by the old a.out way).
var archDenied = []uint32{unix.SYS_IOPERM, unix.SYS_IOPL, unix.SYS_USELIB}
