//go:build linux || darwin

package activities

import "golang.org/x/sys/unix"

// diskSpace says how large the file system of dir is, and how much of
// it an unprivileged process may still take, in bytes.
func diskSpace(dir string) (size, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks) * int64(st.Bsize), int64(st.Bavail) * int64(st.Bsize), nil
}
