package gvisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The provider makes each container's host memory cgroup itself, before
// runsc runs (runsc then uses it as it is, and leaves it), so that it can
// hand the daemon a read-only descriptor of the cgroup's memory.stat
// (runsc's --pass-fd): the host's count of the sandbox's memory, the
// sentry's own heap included, which gVisor's count inside lacks (see
// oomKiller). Hosts without a cgroup v1 memory hierarchy leave it to
// runsc, and the daemon goes without.

// memoryCgroupRoot is the host's cgroup v1 memory hierarchy.
const memoryCgroupRoot = "/sys/fs/cgroup/memory"

// hostStatFD is the daemon's descriptor of its memory cgroup's
// memory.stat.
const hostStatFD = 3

func memoryCgroupDir(cid string) string {
	return filepath.Join(memoryCgroupRoot, cgroupPath(cid))
}

// makeMemoryCgroup makes a container's memory cgroup, limited to limit
// bytes with no swap, and opens its memory.stat; it returns nil when the
// host has no cgroup v1 memory hierarchy.
func makeMemoryCgroup(cid string, limit int64) (*os.File, error) {
	if _, err := os.Stat(filepath.Join(memoryCgroupRoot, "memory.stat")); err != nil {
		return nil, nil
	}
	dir := memoryCgroupDir(cid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory cgroup: %w", err)
	}
	v := []byte(strconv.FormatInt(limit, 10))
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), v, 0); err != nil {
		return nil, fmt.Errorf("memory cgroup: %w", err)
	}
	// Without swap accounting there is no swap limit to set.
	err := os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), v, 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("memory cgroup: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return nil, fmt.Errorf("memory cgroup: %w", err)
	}
	return f, nil
}

// removeMemoryCgroup removes a container's memory cgroup once its
// processes are gone. A cgroup already gone is not an error.
func removeMemoryCgroup(cid string) error {
	dir := memoryCgroupDir(cid)
	// The sandbox's processes may take a moment to leave it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := unix.Rmdir(dir)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			return nil
		case !errors.Is(err, unix.EBUSY) || time.Now().After(deadline):
			return fmt.Errorf("remove memory cgroup %s: %w", dir, err)
		}
	}
}
