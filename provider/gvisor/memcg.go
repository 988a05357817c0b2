package gvisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The provider makes each container's host memory cgroup itself, before
// runsc runs (runsc then uses it as it is, and leaves it), so that it can
// hand the daemon a read-only descriptor of the cgroup's memory.stat
// (runsc's --pass-fd): the host's count of the sandbox's memory, the
// sentry's own heap included, which gVisor's count inside lacks (see
// gvisorinit's oomKiller). Hosts without a cgroup v1 memory hierarchy leave it to
// runsc, and the daemon goes without.

// memoryCgroupRoot is the host's cgroup v1 memory hierarchy.
const memoryCgroupRoot = "/sys/fs/cgroup/memory"

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

// killCgroup kills every process left in a container's memory cgroup,
// which are all the container's: the sandbox and gofer processes of a
// container that runsc no longer knows (a runsc run killed half-way
// leaves them running, and runsc delete cannot find them). A cgroup
// already gone is not an error.
func killCgroup(cid string) error {
	procs := filepath.Join(memoryCgroupDir(cid), "cgroup.procs")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(procs)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("memory cgroup: %w", err)
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("memory cgroup %s: %d processes left", memoryCgroupDir(cid), len(pids))
		}
		for _, pid := range pids {
			if n, err := strconv.Atoi(pid); err == nil {
				_ = unix.Kill(n, unix.SIGKILL)
			}
		}
	}
}

// removeCgroups removes a container's cgroups, in every hierarchy, once
// its processes are gone: the memory cgroup the provider made, and those
// runsc made and, having forgotten the container, did not remove. A
// cgroup already gone is not an error.
func removeCgroups(cid string) error {
	dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(memoryCgroupRoot), "*", cgroupPath(cid)))
	for _, dir := range dirs {
		// The sandbox's processes may take a moment to leave it.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", dir, err)
			}
		}
	}
	return nil
}
