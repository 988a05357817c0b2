package hostsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-dev/berth/errdefs"
)

// listen serves a socket at path that writes name to each connection.
func listen(t *testing.T, path, name string) {
	t.Helper()
	dir, err := os.Open(filepath.Dir(path)) // the path may be too long for an address
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	ln, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(name))
			c.Close()
		}
	}()
}

func reach(t *testing.T, path string) (string, error) {
	t.Helper()
	c, err := Dial(t.Context(), path, os.Geteuid())
	if err != nil {
		return "", err
	}
	defer c.Close()
	b := make([]byte, 16)
	n, _ := c.Read(b)
	return string(b[:n]), nil
}

// TestDial: the host reaches a socket however deep its directory, and
// refuses, as a lost sandbox, anything at the socket's name or its
// directory's that is not a socket of the expected owner: above all a
// link to another sandbox's socket.
func TestDial(t *testing.T) {
	root := t.TempDir()
	other := filepath.Join(root, "b", "run")
	deep := filepath.Join(root, "a")
	for range 8 {
		deep = filepath.Join(deep, "a-long-directory-name-past-what-an-address-holds")
	}
	for _, d := range []string{other, deep} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	listen(t, filepath.Join(other, "d.sock"), "b")
	listen(t, filepath.Join(deep, "d.sock"), "a")
	if got, err := reach(t, filepath.Join(deep, "d.sock")); err != nil || got != "a" {
		t.Fatalf("the socket past an address's length: %q, %v", got, err)
	}

	dir := filepath.Join(root, "c", "run")
	os.MkdirAll(dir, 0o700)
	sock := filepath.Join(dir, "d.sock")
	if _, err := reach(t, sock); err == nil || errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("a socket not there yet: %v, want a failure to connect that is not ErrLost", err)
	}
	if err := os.Symlink(filepath.Join(other, "d.sock"), sock); err != nil {
		t.Fatal(err)
	}
	if got, err := reach(t, sock); !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("a link to another socket: reached %q, err %v; want ErrLost", got, err)
	}
	os.Remove(sock)
	os.WriteFile(sock, nil, 0o600)
	if _, err := reach(t, sock); !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("a regular file: %v; want ErrLost", err)
	}
	os.Remove(sock)

	// The directory itself a link to the other's.
	linked := filepath.Join(root, "d")
	os.Symlink(other, linked)
	if got, err := reach(t, filepath.Join(linked, "d.sock")); err == nil {
		t.Errorf("a directory that is a link: reached %q", got)
	}

	// A socket of another owner.
	if c, err := Dial(t.Context(), filepath.Join(other, "d.sock"), os.Geteuid()+1); !errors.Is(err, errdefs.ErrSandboxLost) {
		if c != nil {
			c.Close()
		}
		t.Errorf("a socket of another uid: %v; want ErrLost", err)
	}
}
