package egress

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
)

func newCAProxy(t *testing.T, path string) (*Proxy, error) {
	t.Helper()
	p, err := New(Config{CAFile: path, Logger: newTestLogger(io.Discard)})
	if err == nil {
		t.Cleanup(func() { p.Close() })
	}
	return p, err
}

// verifiesUnder reports whether p's certificate for a host verifies
// under the authority caPEM: p signs with that authority's key.
func verifiesUnder(t *testing.T, p *Proxy, caPEM []byte) bool {
	t.Helper()
	leaf, err := p.ca.leaf("pypi.org", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "pypi.org", Roots: roots})
	return err == nil
}

func TestCAFilePersists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", ".egress")
	path := filepath.Join(dir, "ca.pem")
	p1, err := newCAProxy(t, path)
	if err != nil {
		t.Fatal(err)
	}
	first := p1.CACertPEM()
	p1.Close()
	for name, want := range map[string]os.FileMode{path: 0o600, dir: 0o700} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", name, fi.Mode().Perm(), want)
		}
	}
	p2, err := newCAProxy(t, path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p2.CACertPEM(), first) {
		t.Error("the authority changed across a restart")
	}
	if !verifiesUnder(t, p2, first) {
		t.Error("the restarted proxy's host certificates do not verify under the first authority")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d files, want the authority's only", len(entries))
	}

	other, err := newCAProxy(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other.CACertPEM(), first) {
		t.Error("a proxy without a file has the file's authority")
	}
}

func TestCAFileMadeOnceByConcurrentStarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.pem")
	var wg sync.WaitGroup
	pems := make([][]byte, 4)
	for i := range pems {
		wg.Go(func() {
			a, err := openAuthority(path, time.Now(), newTestLogger(io.Discard))
			if err != nil {
				t.Error(err)
				return
			}
			pems[i] = a.pem
		})
	}
	wg.Wait()
	for _, p := range pems[1:] {
		if !bytes.Equal(p, pems[0]) {
			t.Fatal("concurrent starts made different authorities")
		}
	}
}

// writeCA writes an authority made at made (valid caValidity from
// then) to path, mode 0600.
func writeCA(t *testing.T, path string, made time.Time) []byte {
	t.Helper()
	a, err := newAuthority(made)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writeAuthority(path, a, true); err != nil {
		t.Fatal(err)
	}
	return a.pem
}

func TestCAFileRenewed(t *testing.T) {
	for name, made := range map[string]time.Time{
		"ends soon": time.Now().Add(-caValidity + 24*time.Hour),
		"ended":     time.Now().Add(-caValidity - time.Hour),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ca.pem")
			old := writeCA(t, path, made)
			p, err := newCAProxy(t, path)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(p.CACertPEM(), old) {
				t.Fatal("an authority at its end was kept")
			}
			if left := time.Until(p.CACert().NotAfter); left < caValidity-time.Hour {
				t.Errorf("the new authority ends in %v", left)
			}
			p.Close()
			again, err := newCAProxy(t, path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again.CACertPEM(), p.CACertPEM()) {
				t.Error("the renewed authority was not kept")
			}
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
				t.Errorf("renewed file's mode %04o", fi.Mode().Perm())
			}
		})
	}
}

func TestCAFileRefused(t *testing.T) {
	good := func(t *testing.T, path string) { writeCA(t, path, time.Now()) }
	pemOf := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	write := func(data []byte, mode os.FileMode) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, data, mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherDER, _ := x509.MarshalPKCS8PrivateKey(otherKey)
	cert := func(isCA bool) []byte {
		tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "x"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(caValidity),
			IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return pemOf("CERTIFICATE", der)
	}
	join := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"readable by others", func(t *testing.T, path string) { good(t, path); os.Chmod(path, 0o644) }, "mode 0644"},
		{"readable by the group", func(t *testing.T, path string) { good(t, path); os.Chmod(path, 0o640) }, "mode 0640"},
		{"writable by others", func(t *testing.T, path string) { good(t, path); os.Chmod(path, 0o602) }, "mode 0602"},
		{"empty", write(nil, 0o600), "want one CERTIFICATE and one PRIVATE KEY"},
		{"not PEM", write([]byte("hello"), 0o600), "not PEM"},
		{"no key", write(cert(true), 0o600), "want one CERTIFICATE and one PRIVATE KEY"},
		{"two certificates", write(join(cert(true), cert(true), pemOf("PRIVATE KEY", keyDER)), 0o600), `"CERTIFICATE" block`},
		{"another key", write(join(cert(true), pemOf("PRIVATE KEY", otherDER)), 0o600), "not the certificate's"},
		{"not an authority", write(join(cert(false), pemOf("PRIVATE KEY", keyDER)), 0o600), "not a certificate authority's"},
		{"garbled key", write(join(cert(true), pemOf("PRIVATE KEY", []byte("junk"))), 0o600), "the key:"},
		{"garbled certificate", write(join(pemOf("CERTIFICATE", []byte("junk")), pemOf("PRIVATE KEY", keyDER)), 0o600), "the certificate:"},
		{"too large", write(bytes.Repeat([]byte("a"), maxCAFileBytes+1), 0o600), "over"},
		{"a directory", func(t *testing.T, path string) { os.Mkdir(path, 0o700) }, "not a regular file"},
		{"a symbolic link", func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "target.pem")
			good(t, target)
			os.Symlink(target, path)
		}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ca.pem")
			tc.make(t, path)
			before, _ := os.ReadFile(path)
			_, err := newCAProxy(t, path)
			if err == nil {
				t.Fatal("New took the file")
			}
			if !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want one line of errdefs.ErrBadInput saying %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("a refused file was changed")
			}
		})
	}
}
