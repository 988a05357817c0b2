package docker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A sandbox's workspace is an ext4 file system of its own, as in the
// linux provider: a sparse image in the sandbox's slot directory, on a
// loop device, bounded in bytes by its size and in files by its inode
// count. Docker's storage drivers bound a container's writable layer
// only on xfs with project quotas (overlay2) or with drivers few hosts
// run, and a bind-mounted directory not at all. The host mounts the
// image, nosuid and nodev, on the slot's workspace directory, which is
// bind-mounted into the container; the loop device detaches itself when
// that mount goes, at Destroy.
const (
	imageFile     = "workspace.img"
	workspaceDir  = "workspace"
	bytesPerInode = 16 << 10 // mke2fs's default ratio: see Resources.Disk
)

// mkfsArgs are the linux provider's: no journal, nothing reserved, inode
// tables left unwritten, so that a fresh image takes about 200 KiB of
// host disk whatever its size.
func mkfsArgs(path string, uid, gid int) []string {
	return []string{"-t", "ext4", "-q", "-F",
		"-b", "4096", "-I", "256", "-i", strconv.Itoa(bytesPerInode), "-m", "0",
		"-O", "^has_journal,^resize_inode",
		"-E", fmt.Sprintf("lazy_itable_init=1,nodiscard,root_owner=%d:%d", uid, gid),
		path}
}

// makeWorkspace makes a sparse image of size bytes in dir, formats it
// with its root owned by uid and gid, and mounts it on the directory dir/workspace.
func makeWorkspace(dir string, size int64, uid, gid int) error {
	path := filepath.Join(dir, imageFile)
	img, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("workspace image: %w", err)
	}
	defer img.Close()
	if err := img.Truncate(size); err != nil {
		return fmt.Errorf("workspace image: %w", err)
	}
	mkfs, err := findMkfs()
	if err != nil {
		return err
	}
	if out, err := exec.Command(mkfs, mkfsArgs(path, uid, gid)...).CombinedOutput(); err != nil {
		return fmt.Errorf("format workspace image: %v: %s", err, strings.TrimSpace(string(out)))
	}
	loop, err := attachLoop(img)
	if err != nil {
		return fmt.Errorf("workspace image: %w", err)
	}
	// The mount keeps the device open; closing this descriptor lets the
	// device detach with the mount.
	defer loop.Close()
	target := filepath.Join(dir, workspaceDir)
	// noinit_itable: the kernel would otherwise zero the inode tables
	// mke2fs left unwritten; nobarrier: the image dies with its sandbox.
	if err := unix.Mount(loop.Name(), target, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "noinit_itable,nobarrier"); err != nil {
		return fmt.Errorf("mount workspace image: %w", err)
	}
	// lost+found would be an entry nobody in the sandbox can read, in
	// every listing and snapshot.
	if err := unix.Rmdir(filepath.Join(target, "lost+found")); err != nil {
		unmountWorkspace(dir)
		return fmt.Errorf("workspace image: remove lost+found: %w", err)
	}
	return nil
}

// unmountWorkspace unmounts the workspace in dir, if it is mounted.
func unmountWorkspace(dir string) error {
	err := unix.Unmount(filepath.Join(dir, workspaceDir), unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // not a mount point, or no directory
	}
	return fmt.Errorf("unmount workspace: %w", err)
}

// findMkfs finds mke2fs, in PATH or in the sbin directories a service's
// PATH may lack.
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mke2fs"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mke2fs", "/sbin/mke2fs"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", errors.New("mke2fs not found: install e2fsprogs (the docker provider formats each sandbox's workspace with it)")
}

// attachLoop puts img on a free loop device, which detaches itself when
// its last user closes it, and returns the device, open.
func attachLoop(img *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	// Direct I/O keeps the image's blocks out of the host's page cache.
	flags := uint32(unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO)
	for range 64 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd()), Size: 4096, Info: unix.LoopInfo64{Flags: flags}}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) && flags&unix.LO_FLAGS_DIRECT_IO != 0 {
			flags &^= unix.LO_FLAGS_DIRECT_IO // the image's file system may not do direct I/O
			cfg.Info.Flags = flags
			err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		}
		switch {
		case err == nil:
			return dev, nil
		case errors.Is(err, unix.EBUSY):
			dev.Close() // another process took it between the two calls
		default:
			dev.Close()
			return nil, fmt.Errorf("configure %s: %w", dev.Name(), err)
		}
	}
	return nil, errors.New("no free loop device after 64 tries")
}
