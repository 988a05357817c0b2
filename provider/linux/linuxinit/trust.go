package linuxinit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Where a sandbox finds the egress proxy's authority (see
// WarmMsg.ProxyCA): TrustDir is a read-only tmpfs of the daemon's own,
// so that it is there whatever the root holds in /etc.
const (
	TrustDir = "/berth"
	// CABundle is the root's own system bundle followed by the proxy's
	// authority.
	CABundle = TrustDir + "/ca-bundle.pem"
	// ProxyCA is the proxy's authority alone.
	ProxyCA = TrustDir + "/proxy-ca.pem"
	// MaxSystemBundle bounds the system bundle read from the root (an
	// image's is the image author's to make as large as it likes);
	// MaxProxyCA bounds the proxy's authority.
	MaxSystemBundle = 4 << 20
	MaxProxyCA      = 64 << 10
)

// systemBundles are where roots keep their system bundle, as Go's
// crypto/x509 looks for them: the first that exists is the one a
// sandbox's programs would otherwise use.
var systemBundles = []string{
	"etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Alpine, Arch
	"etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL
	"etc/ssl/ca-bundle.pem",                            // openSUSE
	"etc/pki/tls/cacert.pem",                           // OpenELEC
	"etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"etc/ssl/cert.pem",                                 // Alpine
}

// trustProxyCA writes the bundles of TrustDir in the root built on
// newRoot: the root's system bundle, read inside it (a link in an
// image resolves in the image, never on the host), and ca after it.
func trustProxyCA(newRoot, ca string) error {
	if len(ca) > MaxProxyCA {
		return fmt.Errorf("the proxy's authority is over %d bytes", MaxProxyCA)
	}
	system, err := systemBundle(newRoot)
	if err != nil {
		return err
	}
	dir := filepath.Join(newRoot, TrustDir)
	size := len(system) + 2*len(ca) + 64<<10
	if err := mountNew("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("mode=0755,size=%d", size)); err != nil {
		return err
	}
	bundle := append([]byte(nil), system...)
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, ca...)
	if err := os.WriteFile(filepath.Join(newRoot, CABundle), bundle, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(newRoot, ProxyCA), []byte(ca), 0o644); err != nil {
		return err
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount %s: %w", TrustDir, err)
	}
	return nil
}

// systemBundle reads the first of systemBundles that the root holds,
// nothing when it holds none.
func systemBundle(newRoot string) ([]byte, error) {
	root, err := unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root: %w", err)
	}
	defer unix.Close(root)
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for _, name := range systemBundles {
		fd, err := openat2(root, name, how)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open /%s: %w", name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		b, err := readRegular(f, MaxSystemBundle)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("/%s: %w", name, err)
		}
		return b, nil
	}
	return nil, nil
}

func readRegular(f *os.File, limit int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("over %d bytes", limit)
	}
	return b, nil
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
