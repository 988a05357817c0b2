package linuxinit

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider/internal/cabundle"
)

// Where a sandbox finds the egress proxy's authority (see
// WarmMsg.ProxyCA and package cabundle): TrustDir is a read-only tmpfs
// of the daemon's own, so that it is there whatever the root holds in
// /etc.
const (
	TrustDir        = cabundle.Dir
	CABundle        = cabundle.Bundle
	ProxyCA         = cabundle.ProxyCA
	MaxSystemBundle = cabundle.MaxSystemBundle
	MaxProxyCA      = cabundle.MaxProxyCA
)

// trustProxyCA writes the bundles of TrustDir in the root built on
// newRoot: the root's system bundle, read inside it (a link in an
// image resolves in the image, never on the host), and ca after it.
func trustProxyCA(newRoot, ca string) error {
	if err := cabundle.CheckCA(ca); err != nil {
		return err
	}
	system, err := systemBundle(newRoot)
	if err != nil {
		return err
	}
	dir := filepath.Join(newRoot, TrustDir)
	if err := mountNew("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("mode=0755,size=%d", cabundle.Size(system, ca))); err != nil {
		return err
	}
	if err := cabundle.Write(dir, system, ca); err != nil {
		return err
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount %s: %w", TrustDir, err)
	}
	return nil
}

// systemBundle reads the root's system bundle (cabundle.ReadSystem),
// each name resolved inside newRoot: nothing when it holds none.
func systemBundle(newRoot string) ([]byte, error) {
	root, err := unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root: %w", err)
	}
	defer unix.Close(root)
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	return cabundle.ReadSystem(func(name string) (*os.File, error) {
		fd, err := openat2(root, name, how)
		if err != nil {
			return nil, err
		}
		return os.NewFile(uintptr(fd), name), nil
	})
}

// openat2 is unix.Openat2, tried again when the kernel says EAGAIN (a
// rename or mount anywhere while it resolves).
func openat2(root int, name string, how *unix.OpenHow) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat2(root, name, how)
		if err != unix.EAGAIN || i == 100 {
			return fd, err
		}
	}
}
