package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider/internal/wsimage"
)

// Each sandbox's workspace is a file system of its own, so that filling
// it fills only it: a sparse ext4 image in the sandbox's state
// directory, on a loop device, bounded in bytes by the image's size and
// in files by its inode count.
//
// The host formats the image and mounts it with the new mount API,
// attached nowhere: the mount is a descriptor, which it passes to the
// daemon, which attaches it in its own mount namespace. The host's mount
// table never holds it, and the loop device is set to detach itself when
// its last user closes it. So the image's mount lives as long as the
// sandbox's mount namespace (its processes) and the creating process's
// reference (see holdWorkspace), and the loop device as long as the
// mount: killing the sandbox frees both, whether or not the process that
// made it is still there, and a process killed half way through making
// one leaves only the image file in a state directory, which the
// existing sweeps of warm and destroyed directories remove.
//
// Deleted files' blocks stay allocated in the image (it is not mounted
// with discard, which would slow every removal): a sandbox takes at most
// its size of host disk, until it is destroyed.
const (
	imageFile = "workspace.img"
	// bytesPerInode sets how many files a workspace holds.
	bytesPerInode = wsimage.BytesPerInode
	// DefaultDisk is a workspace's size when neither the sandbox nor the
	// provider's configuration names one.
	DefaultDisk = 10 << 30
	// MinDisk is the smallest workspace a sandbox may ask for.
	MinDisk = 16 << 20
)

// makeWorkspace makes a sparse image of size bytes at path, formats it
// with its root directory owned by uid and gid, and returns a detached
// mount of it, nosuid and nodev.
func makeWorkspace(path string, size int64, uid, gid int) (*os.File, error) {
	loop, err := wsimage.Format(path, size, uid, gid)
	if err != nil {
		return nil, err
	}
	// The mount keeps the loop device open; once it has, this descriptor
	// is not needed, and closing it lets the device detach with the mount.
	defer loop.Close()
	mnt, err := mountExt4(loop.Name())
	if err != nil {
		return nil, fmt.Errorf("mount workspace image: %w", err)
	}
	// mke2fs makes lost+found, owned by the host's root: in the sandbox
	// it would be an entry nobody there can read, in every listing and
	// snapshot. fsck, its only user, never runs on these images.
	if err := unix.Unlinkat(int(mnt.Fd()), "lost+found", unix.AT_REMOVEDIR); err != nil {
		mnt.Close()
		return nil, fmt.Errorf("workspace image: remove lost+found: %w", err)
	}
	return mnt, nil
}

// mountExt4 mounts the ext4 file system on a block device, attached
// nowhere, and returns the mount's descriptor.
func mountExt4(dev string) (*os.File, error) {
	fsfd, err := unix.Fsopen("ext4", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "source", dev); err != nil {
		return nil, fmt.Errorf("fsconfig source: %w", err)
	}
	// Without it the kernel would zero the inode tables mke2fs left
	// unwritten, a few hundred MiB of host disk for 10 GiB.
	if err := unix.FsconfigSetFlag(fsfd, "noinit_itable"); err != nil {
		return nil, fmt.Errorf("fsconfig noinit_itable: %w", err)
	}
	// Nor would it have the host's disk flush its cache at every
	// superblock write, as at mount and unmount (on the way of Destroy):
	// the image is thrown away with the sandbox, whatever it holds.
	if err := unix.FsconfigSetFlag(fsfd, "nobarrier"); err != nil {
		return nil, fmt.Errorf("fsconfig nobarrier: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("fsconfig create: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("fsmount: %w", err)
	}
	return os.NewFile(uintptr(mfd), "workspace"), nil
}

// formatWorkspace starts making the workspace of a daemon whose state
// directory is dir, and returns a function that waits for its mount.
func (p *Provider) formatWorkspace(dir string, size int64) func() (*os.File, error) {
	type result struct {
		mnt *os.File
		err error
	}
	c := make(chan result, 1)
	go func() {
		uid, gid := p.cfg.UIDBase+sandboxUID, p.cfg.UIDBase+sandboxGID
		mnt, err := makeWorkspace(filepath.Join(dir, imageFile), size, uid, gid)
		c <- result{mnt, err}
	}()
	return sync.OnceValues(func() (*os.File, error) {
		r := <-c
		return r.mnt, r.err
	})
}

// holdWorkspace keeps a reference to a sandbox's workspace mount until
// the sandbox is destroyed. Tearing down a file system and its loop
// device takes a few RCU grace periods and I/O, 20-40 ms on a busy
// host: the last reference pays for it. Without this one that would be
// the sandbox's last process as it exits, which Destroy waits for; with
// it, the cleanup that Destroy leaves in the background pays. A process
// that did not create the sandbox holds no reference, and its Destroy
// pays. If this process dies, the sandbox's own reference remains.
func (p *Provider) holdWorkspace(id string, mnt *os.File) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.held[id]; old != nil {
		old.Close()
	}
	p.held[id] = mnt
}

// releaseWorkspace returns the reference holdWorkspace kept, or nil, for
// the caller to close once the sandbox is dead.
func (p *Provider) releaseWorkspace(id string) *os.File {
	p.mu.Lock()
	defer p.mu.Unlock()
	mnt := p.held[id]
	delete(p.held, id)
	return mnt
}

// releaseWorkspaces drops every reference: the sandboxes keep their own.
func (p *Provider) releaseWorkspaces() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, mnt := range p.held {
		mnt.Close()
		delete(p.held, id)
	}
}
