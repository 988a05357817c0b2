package linuxinit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemBundle: the bundle is read inside the root; a link that
// leads out of it resolves in it, and what is not a regular file of a
// bounded size is refused.
func TestSystemBundle(t *testing.T) {
	mk := func(t *testing.T, files map[string]string, links map[string]string) string {
		root := t.TempDir()
		for name, content := range files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for name, target := range links {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	t.Run("first found", func(t *testing.T) {
		root := mk(t, map[string]string{"etc/pki/tls/certs/ca-bundle.crt": "fedora", "etc/ssl/cert.pem": "alpine"}, nil)
		if b, err := systemBundle(root); err != nil || string(b) != "fedora" {
			t.Fatalf("%q, %v", b, err)
		}
	})
	t.Run("none", func(t *testing.T) {
		if b, err := systemBundle(t.TempDir()); err != nil || b != nil {
			t.Fatalf("%q, %v", b, err)
		}
	})
	t.Run("absolute link resolves in the root", func(t *testing.T) {
		host := filepath.Join(t.TempDir(), "hostfile")
		if err := os.WriteFile(host, []byte("host's"), 0o644); err != nil {
			t.Fatal(err)
		}
		root := mk(t, map[string]string{strings.TrimPrefix(host, "/"): "root's"},
			map[string]string{"etc/ssl/certs/ca-certificates.crt": host})
		if b, err := systemBundle(root); err != nil || string(b) != "root's" {
			t.Fatalf("%q, %v", b, err)
		}
	})
	t.Run("dotdot link stays in the root", func(t *testing.T) {
		root := mk(t, nil, map[string]string{"etc/ssl/certs/ca-certificates.crt": "../../../../../../../etc/passwd"})
		if b, err := systemBundle(root); err != nil || b != nil {
			t.Fatalf("%q, %v", b, err)
		}
	})
	t.Run("not a regular file", func(t *testing.T) {
		root := mk(t, nil, map[string]string{"etc/ssl/certs/ca-certificates.crt": "/dev/zero"})
		if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(root, "dev/zero"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := systemBundle(root); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		root := mk(t, map[string]string{"etc/ssl/certs/ca-certificates.crt": string(bytes.Repeat([]byte("x"), MaxSystemBundle+1))}, nil)
		if _, err := systemBundle(root); err == nil || !strings.Contains(err.Error(), "over") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("authority too large", func(t *testing.T) {
		if err := trustProxyCA(t.TempDir(), strings.Repeat("x", MaxProxyCA+1)); err == nil {
			t.Fatal("accepted")
		}
	})
}
