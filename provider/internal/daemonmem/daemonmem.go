// Package daemonmem holds what the in-sandbox daemons of the docker and
// gvisor providers share in enforcing a sandbox's memory limit: the
// reserve its commands cannot take, and the daemon's own memory.
package daemonmem

import (
	"os"
	"strconv"
	"strings"
)

// Reserve is how much of a sandbox's memory limit its commands cannot
// take, so that the daemon can serve (read, export, start commands) when
// they have taken all they can: 16 MiB, or a quarter of the limit when
// that is less, as in the linux provider.
func Reserve(limit int64) int64 { return min(16<<20, limit/4) }

// Self is the daemon's own memory: its resident pages less those shared
// with files (its binary's, which all sandboxes share).
func Self() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0
	}
	resident, _ := strconv.ParseInt(f[1], 10, 64)
	shared, _ := strconv.ParseInt(f[2], 10, 64)
	return max(resident-shared, 0) * int64(os.Getpagesize())
}
