package linuxinit

import "golang.org/x/sys/unix"

// auditArch is the architecture whose calls a sandbox may make: AArch64
// (a 32-bit ARM call would bypass the numbers checked, and is killed).
const auditArch = unix.AUDIT_ARCH_AARCH64

// archDenied is empty: arm64 has neither port I/O (ioperm, iopl) nor
// uselib, and none of the legacy calls (open, fork, ...) the filter
// might otherwise have to name: their *at and clone forms, which it
// checks, are the only ones.
var archDenied []uint32
