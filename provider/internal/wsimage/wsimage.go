// Package wsimage makes a sandbox's workspace a file system of its own,
// so that filling it fills only it: a sparse ext4 image on a loop device,
// bounded in bytes by the image's size and in files by its inode count,
// mounted on a directory of the host for a runtime to bind into its
// sandbox.
//
// Format makes the image and its loop device, for every provider; Make
// also mounts it on a directory, for runtimes that take a directory (the
// linux provider mounts it detached instead, and passes the mount to its
// sandbox as a descriptor).
package wsimage

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// BytesPerInode sets how many files a workspace holds: one per 16 KiB of
// its size, mke2fs's own default ratio.
const BytesPerInode = 16 << 10

// MinSize is the smallest image: what ext4 needs.
const MinSize = 16 << 20

// mkfsArgs are the options the image is formatted with:
//   - no journal: the workspace dies with its sandbox, and snapshots are
//     its durable copy, so crash consistency buys nothing, and a journal
//     costs writes, a kernel thread and 64 MiB of the workspace's space;
//   - no space reserved for root (nobody in a sandbox is the host's root)
//     and no blocks reserved for growing the file system offline, which
//     would be written out as data;
//   - inode tables left unwritten (lazy_itable_init) and not zeroed after
//     mount either (noinit_itable, which the mount must pass), so a fresh
//     image takes about 200 KiB of host disk whatever its size;
//   - explicit block and inode sizes, so that the host's mke2fs.conf and
//     its types for small file systems do not change them.
func mkfsArgs(path string, uid, gid int) []string {
	return []string{"-t", "ext4", "-q", "-F",
		"-b", "4096", "-I", "256", "-i", strconv.Itoa(BytesPerInode), "-m", "0",
		"-O", "^has_journal,^resize_inode",
		"-E", fmt.Sprintf("lazy_itable_init=1,nodiscard,root_owner=%d:%d", uid, gid),
		path}
}

// Format makes a sparse image of size bytes at image, formats it with
// its root directory owned by uid and gid, and returns a loop device of
// it, open. The device detaches itself when its last user closes it:
// once mounted, the mount.
func Format(image string, size int64, uid, gid int) (*os.File, error) {
	if size < MinSize {
		return nil, fmt.Errorf("workspace image of %d bytes is below the minimum of %d", size, int64(MinSize))
	}
	img, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("workspace image: %w", err)
	}
	defer img.Close()
	if err := img.Truncate(size); err != nil {
		return nil, fmt.Errorf("workspace image: %w", err)
	}
	mkfs, err := findMkfs()
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command(mkfs, mkfsArgs(image, uid, gid)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("format workspace image: %v: %s", err, strings.TrimSpace(string(out)))
	}
	loop, err := attachLoop(img)
	if err != nil {
		return nil, fmt.Errorf("workspace image: %w", err)
	}
	return loop, nil
}

// Make makes a sparse image of size bytes at image, formats it with its
// root directory owned by uid and gid, and mounts it, nosuid and nodev,
// on the existing directory target. The loop device detaches itself when
// the mount goes (Unmount).
func Make(image, target string, size int64, uid, gid int) error {
	loop, err := Format(image, size, uid, gid)
	if err != nil {
		return err
	}
	// The mount keeps the device open; closing this descriptor lets the
	// device detach with the mount.
	defer loop.Close()
	// noinit_itable: the kernel would otherwise zero the inode tables
	// mke2fs left unwritten; nobarrier: the image dies with its sandbox,
	// so the host's disk need not flush its cache for it.
	if err := unix.Mount(loop.Name(), target, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "noinit_itable,nobarrier"); err != nil {
		return fmt.Errorf("mount workspace image: %w", err)
	}
	// lost+found would be an entry nobody in the sandbox can read, in
	// every listing and snapshot; fsck, its only user, never runs here.
	if err := unix.Rmdir(target + "/lost+found"); err != nil {
		Unmount(target)
		return fmt.Errorf("workspace image: remove lost+found: %w", err)
	}
	return nil
}

// Unmount unmounts the workspace mounted on target, if it is; its loop
// device then detaches itself once nothing else holds the file system.
func Unmount(target string) error {
	err := unix.Unmount(target, unix.MNT_DETACH)
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
	return "", errors.New("mke2fs not found: install e2fsprogs (workspaces are formatted with it)")
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
			flags &^= unix.LO_FLAGS_DIRECT_IO // the image's file system may not do direct I/O (tmpfs)
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
