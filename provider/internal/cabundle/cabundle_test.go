package cabundle

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, c := range []struct{ name, system, want string }{
		{"system bundle ending in a newline", "sys\n", "sys\nCA"},
		{"system bundle without a final newline", "sys", "sys\nCA"},
		{"no system bundle", "", "CA"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Write(dir, []byte(c.system), "CA"); err != nil {
				t.Fatal(err)
			}
			for file, want := range map[string]string{filepath.Base(Bundle): c.want, filepath.Base(ProxyCA): "CA"} {
				b, err := os.ReadFile(filepath.Join(dir, file))
				if err != nil || string(b) != want {
					t.Errorf("%s: %q, %v; want %q", file, b, err, want)
				}
			}
		})
	}
}

func TestReadSystem(t *testing.T) {
	root := t.TempDir()
	open := func(name string) (*os.File, error) { return os.Open(filepath.Join(root, name)) }
	if b, err := ReadSystem(open); err != nil || b != nil {
		t.Errorf("a root without a bundle: %q, %v", b, err)
	}
	// A later path is found when the earlier are missing.
	rhel := filepath.Join(root, SystemBundles[1])
	if err := os.MkdirAll(filepath.Dir(rhel), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rhel, []byte("rhel"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadSystem(open); err != nil || string(b) != "rhel" {
		t.Errorf("%q, %v; want rhel's", b, err)
	}
	// What open refuses to follow counts as missing; other errors fail.
	loop := func(string) (*os.File, error) { return nil, &os.PathError{Op: "open", Err: syscall.ELOOP} }
	if b, err := ReadSystem(loop); err != nil || b != nil {
		t.Errorf("links refused: %q, %v", b, err)
	}
	denied := func(string) (*os.File, error) { return nil, &os.PathError{Op: "open", Err: syscall.EACCES} }
	if _, err := ReadSystem(denied); err == nil {
		t.Error("an unreadable bundle was taken for none")
	}
	// A bundle over the bound fails.
	if err := os.Truncate(rhel, MaxSystemBundle+1); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSystem(open); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("a bundle over %d bytes: %v", MaxSystemBundle, err)
	}
}

func TestSetEnv(t *testing.T) {
	spec := map[string]string{"GIT_SSL_CAINFO": "/workspace/mine.pem"}
	env := map[string]string{"PATH": "/bin", "GIT_SSL_CAINFO": "/workspace/mine.pem"}
	SetEnv(env, spec)
	want := Env()
	want["PATH"] = "/bin"
	want["GIT_SSL_CAINFO"] = "/workspace/mine.pem"
	if len(env) != len(want) {
		t.Errorf("env = %v, want %v", env, want)
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if err := CheckCA(strings.Repeat("x", MaxProxyCA+1)); err == nil {
		t.Error("an authority over the bound was taken")
	}
}
