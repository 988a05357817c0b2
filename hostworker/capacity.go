package hostworker

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
)

// MemoryReserve is what a host keeps for itself of its memory by
// default, beside its sandboxes' memory limits: the larger of 1 GiB and
// a tenth of its memory (the worker, its providers' daemons, the page
// cache the kernel needs).
func MemoryReserve(total int64) int64 { return max(1<<30, total/10) }

// DefaultMaxMemory is a host's bound on the sum of its sandboxes' memory
// limits by default: its memory (MemTotal in /proc/meminfo) less
// MemoryReserve; zero, no bound, where the memory cannot be read.
func DefaultMaxMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	total, err := memTotal(b)
	if err != nil || total <= MemoryReserve(total) {
		return 0
	}
	return total - MemoryReserve(total)
}

// memTotal reads MemTotal off /proc/meminfo's text, in bytes.
func memTotal(meminfo []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		var kib int64
		if n, _ := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kib); n == 1 && kib > 0 {
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}

// maxMemory is HostConfig.MaxMemory as the workers take it.
func maxMemory(d int64) int64 {
	switch {
	case d == 0:
		return DefaultMaxMemory()
	case d < 0:
		return 0
	}
	return d
}
