// Package cabundle is where a sandbox finds the egress proxy's
// authority, which it trusts so that HTTPS to a host with a credential
// (terminated by the proxy, which adds the credential) verifies: Dir, a
// read-only directory of the daemon's own, holds Bundle (the root's own
// system bundle followed by the authority) and ProxyCA (the authority
// alone), and Env points the usual TLS clients at them. The linux,
// docker and gvisor providers' daemons write it (see docs/network.md,
// "Secrets"); the hosts set Env.
//
// It runs inside sandboxes (berth-sandboxd links it) and links nothing
// of the host's.
package cabundle

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Where a sandbox finds the proxy's authority, whatever its root holds
// in /etc.
const (
	Dir = "/berth"
	// Bundle is the root's own system bundle followed by the proxy's
	// authority.
	Bundle = Dir + "/ca-bundle.pem"
	// ProxyCA is the proxy's authority alone.
	ProxyCA = Dir + "/proxy-ca.pem"
	// MaxSystemBundle bounds the system bundle read from the root (an
	// image's is the image author's to make as large as it likes);
	// MaxProxyCA bounds the proxy's authority.
	MaxSystemBundle = 4 << 20
	MaxProxyCA      = 64 << 10
)

// SystemBundles are where roots keep their system bundle, relative to
// the root, as Go's crypto/x509 looks for them: the first that exists
// is the one a sandbox's programs would otherwise use.
var SystemBundles = []string{
	"etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Alpine, Arch
	"etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL
	"etc/ssl/ca-bundle.pem",                            // openSUSE
	"etc/pki/tls/cacert.pem",                           // OpenELEC
	"etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"etc/ssl/cert.pem",                                 // Alpine
}

// Env are the variables that point the usual TLS clients at the
// bundles: OpenSSL and Python's ssl (SSL_CERT_FILE), requests, pip,
// curl, git, and Node, which adds its file to its own roots.
func Env() map[string]string {
	return map[string]string{
		"SSL_CERT_FILE":       Bundle,
		"REQUESTS_CA_BUNDLE":  Bundle,
		"PIP_CERT":            Bundle,
		"CURL_CA_BUNDLE":      Bundle,
		"GIT_SSL_CAINFO":      Bundle,
		"NODE_EXTRA_CA_CERTS": ProxyCA,
	}
}

// SetEnv adds Env to env, but for the variables spec (the sandbox's
// own environment) sets: a TLS client the sandbox's user configures
// keeps its setting.
func SetEnv(env, spec map[string]string) {
	for k, v := range Env() {
		if _, ok := spec[k]; !ok {
			env[k] = v
		}
	}
}

// CheckCA checks the proxy's authority against MaxProxyCA.
func CheckCA(ca string) error {
	if len(ca) > MaxProxyCA {
		return fmt.Errorf("the proxy's authority is over %d bytes", MaxProxyCA)
	}
	return nil
}

// ReadSystem reads the first of SystemBundles that open finds, nothing
// when it finds none. open opens a name relative to the root; it
// returns an error wrapping ENOENT, ENOTDIR or ELOOP for one that is
// not there (or not to be followed).
func ReadSystem(open func(name string) (*os.File, error)) ([]byte, error) {
	for _, name := range SystemBundles {
		f, err := open(name)
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open /%s: %w", name, err)
		}
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

// Size is what a tmpfs holding the bundles of system and ca needs.
func Size(system []byte, ca string) int { return len(system) + 2*len(ca) + 64<<10 }

// Write writes the bundles into dir (Dir, as the writer sees it): the
// system bundle with ca after it, and ca alone, root's and readable by
// all.
func Write(dir string, system []byte, ca string) error {
	bundle := append([]byte(nil), system...)
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, ca...)
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(Bundle)), bundle, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, filepath.Base(ProxyCA)), []byte(ca), 0o644)
}

// Install writes the bundles into Dir from inside the sandbox's root,
// reading the root's own system bundle (a link there resolves in the
// sandbox, which is all this process can see): the docker and gvisor
// daemons call it before they serve, on the tmpfs their host mounted
// at Dir. Dir is then made read-only: remounted when the daemon may
// (gVisor's), else left as files and a directory the sandbox user
// cannot write (Docker's, without CAP_SYS_ADMIN).
func Install(ca string) error {
	if err := CheckCA(ca); err != nil {
		return err
	}
	system, err := ReadSystem(func(name string) (*os.File, error) { return os.Open("/" + name) })
	if err != nil {
		return err
	}
	if err := Write(Dir, system, ca); err != nil {
		return err
	}
	const ro = syscall.MS_REMOUNT | syscall.MS_BIND | syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	if err := syscall.Mount("", Dir, "", ro, ""); err == nil {
		return nil
	}
	return os.Chmod(Dir, 0o555)
}
