package linuxinit

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider/internal/sandboxspec"
)

// hostEntries are what a sandbox sees of the host's root when it has no
// root filesystem of its own. On merged-/usr hosts the last ones are
// symbolic links into /usr, and are copied as such.
var hostEntries = []string{"usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// reserved names are mounted by berth whatever the root filesystem holds.
var reserved = map[string]bool{"workspace": true, "tmp": true, "proc": true, "dev": true, "sys": true, "berth": true}

// devices are bound from the host into the sandbox's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// prepareRoot builds the sandbox's root on newRoot, all but its
// workspace: read-only binds of the host's or rootfs's entries, /tmp,
// /proc and /dev. newRoot is a directory shared by every sandbox; the
// tmpfs mounted on it is this daemon's alone, in its own mount namespace.
// rootfs, if not nil, is the root filesystem as a detached mount (see
// sendRootFS). /tmp and /dev/shm hold tmpSize bytes each. resolvConf,
// if not empty, is the host root's /etc/resolv.conf instead of the
// host's (see WarmMsg.ResolvConf). proxyCA, if not empty, is trusted
// in TrustDir (see WarmMsg.ProxyCA).
func prepareRoot(newRoot string, rootfs *os.File, tmpSize int64, resolvConf, proxyCA string) error {
	// Nothing mounted from here on may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	at := func(name string) string { return filepath.Join(newRoot, name) }
	if rootfs != nil {
		if err := bindRootFS(rootfs, at); err != nil {
			return err
		}
	} else if err := bindHost(at); err != nil {
		return err
	} else if err := overlayEtc(at, resolvConf); err != nil {
		return fmt.Errorf("/etc: %w", err)
	}
	if proxyCA != "" {
		if err := trustProxyCA(newRoot, proxyCA); err != nil {
			return fmt.Errorf("%s: %w", TrustDir, err)
		}
	}
	if err := os.Mkdir(at("workspace"), 0o755); err != nil {
		return err
	}
	// Pages of a tmpfs are charged to the sandbox's memory but belong to
	// no process: a size keeps them from taking all of it.
	tmpOpts := "mode=1777,size=" + strconv.FormatInt(tmpSize, 10)
	if err := mountNew("tmpfs", at("tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return err
	}
	if err := mountNew("proc", at("proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := setupDev(at("dev"), tmpOpts); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	return os.Mkdir(at(".oldroot"), 0o700)
}

// enterRoot attaches the workspace's mount in the root prepareRoot
// built, and makes it the process's root: the host's file system is gone
// from the sandbox's view afterwards.
func enterRoot(newRoot string, workspace *os.File) error {
	if err := attachWorkspace(workspace, filepath.Join(newRoot, "workspace")); err != nil {
		return err
	}
	if err := unix.PivotRoot(newRoot, filepath.Join(newRoot, ".oldroot")); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.oldroot", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach host root: %w", err)
	}
	if err := os.Remove("/.oldroot"); err != nil {
		return err
	}
	// The root itself holds only mount points: make it read-only.
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make root read-only: %w", err)
	}
	return nil
}

func bindHost(at func(string) string) error {
	for _, name := range hostEntries {
		if err := copyEntry("/"+name, at(name)); err != nil {
			return err
		}
	}
	return nil
}

// bindRootFS attaches the detached mount tree at rootfsMount in the new
// root, binds its entries from there, and detaches it again.
func bindRootFS(tree *os.File, at func(string) string) error {
	root := at(rootfsMount)
	if err := os.Mkdir(root, 0o700); err != nil {
		return err
	}
	if err := unix.MoveMount(int(tree.Fd()), "", unix.AT_FDCWD, root, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach root filesystem: %w", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("read root filesystem: %w", err)
	}
	for _, e := range entries {
		if reserved[e.Name()] || e.Name() == rootfsMount {
			continue
		}
		if err := copyEntry(filepath.Join(root, e.Name()), at(e.Name())); err != nil {
			return err
		}
	}
	if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach root filesystem: %w", err)
	}
	return os.Remove(root)
}

// rootfsMount is where a root filesystem is attached in the new root
// while its entries are bound.
const rootfsMount = ".berth-rootfs"

// copyEntry puts one top-level entry of a root into the new root:
// symbolic links are recreated, directories and files bound read-only.
func copyEntry(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return err
		}
	default:
		return nil
	}
	return bindMount(src, dst, true)
}

// bindMount binds src on dst, read-only if asked. Binding in a user
// namespace must be recursive when the source has mounts below it, and a
// remount must keep the flags the kernel locked on the original.
func bindMount(src, dst string, readOnly bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dst, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV) | lockedFlags(st.Flags)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", dst, err)
	}
	return nil
}

// lockedFlags translates statfs flags into the mount flags a remount
// must repeat.
func lockedFlags(st int64) uintptr {
	var f uintptr
	for _, m := range []struct {
		st    int64
		mount uintptr
	}{
		{unix.ST_RDONLY, unix.MS_RDONLY},
		{unix.ST_NOSUID, unix.MS_NOSUID},
		{unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if st&m.st != 0 {
			f |= m.mount
		}
	}
	return f
}

func mountNew(source, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, target, err)
	}
	return nil
}

// setupDev makes a minimal /dev: the harmless character devices, a
// private pseudo-terminal instance, shared memory, and the usual links.
func setupDev(dev, shmOpts string) error {
	if err := mountNew("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, d := range devices {
		if err := copyDevice("/dev/"+d, filepath.Join(dev, d)); err != nil {
			return err
		}
	}
	if err := mountNew("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	if err := mountNew("tmpfs", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, shmOpts); err != nil {
		return err
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

func copyDevice(src, dst string) error {
	if err := os.WriteFile(dst, nil, 0o666); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return nil
}

// sandboxEtc are the files of /etc the sandbox sees instead of the
// host's.
var sandboxEtc = sandboxspec.Etc()

// overlayEtc binds sandboxEtc over the host's /etc bound at at("etc").
// The files are written in a tmpfs of their own, detached once they are
// bound, so that the sandbox sees them only where they belong.
func overlayEtc(at func(string) string, resolvConf string) error {
	files := sandboxEtc
	if resolvConf != "" {
		// Bound only over a regular file: a bind follows a symbolic
		// link, which would lead it out of the sandbox's /etc.
		if fi, err := os.Lstat(filepath.Join(at("etc"), "resolv.conf")); err == nil && fi.Mode().IsRegular() {
			files = maps.Clone(sandboxEtc)
			files["resolv.conf"] = resolvConf
		}
	}
	dir := at(".etc")
	if err := mountNew("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for name, content := range files {
		src, dst := filepath.Join(dir, name), filepath.Join(at("etc"), name)
		if _, err := os.Stat(dst); err != nil {
			continue // a bind needs a file to cover
		}
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			return err
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", dst, err)
		}
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("remount %s: %w", dst, err)
		}
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return err
	}
	return os.Remove(dir)
}

// attachWorkspace attaches the workspace's mount, received from the
// host, on target. It runs in the daemon, in the sandbox's mount
// namespace.
func attachWorkspace(mnt *os.File, target string) error {
	if err := unix.MoveMount(int(mnt.Fd()), "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach workspace: %w", err)
	}
	return nil
}
