package docker

import (
	"path/filepath"

	"github.com/berth-dev/berth/provider/internal/wsimage"
)

// A sandbox's workspace is an ext4 file system of its own, as in the
// linux provider (internal/wsimage): a sparse image in the sandbox's
// slot directory, on a loop device, bounded in bytes by its size and in
// files by its inode count. Docker's storage drivers bound a
// container's writable layer only on xfs with project quotas (overlay2)
// or with drivers few hosts run, and a bind-mounted directory not at
// all. The host mounts the image, nosuid and nodev, on the slot's
// workspace directory, which is bind-mounted into the container; the
// loop device detaches itself when that mount goes, at Destroy.
const (
	imageFile    = "workspace.img"
	workspaceDir = "workspace"
)

// makeWorkspace makes the workspace image of size bytes in dir, its root
// owned by uid and gid, and mounts it on dir/workspace.
func makeWorkspace(dir string, size int64, uid, gid int) error {
	return wsimage.Make(filepath.Join(dir, imageFile), filepath.Join(dir, workspaceDir), size, uid, gid)
}

// unmountWorkspace unmounts the workspace in dir, if it is mounted.
func unmountWorkspace(dir string) error {
	return wsimage.Unmount(filepath.Join(dir, workspaceDir))
}
