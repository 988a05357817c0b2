//go:build unix

package egress

import "syscall"

// fdLimit is the process's limit of open file descriptors, if known.
func fdLimit() (uint64, bool) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, false
	}
	return uint64(l.Cur), true
}
