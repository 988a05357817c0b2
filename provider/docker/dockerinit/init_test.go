package dockerinit

import (
	"os"
	"testing"
)

// TestBaseEnv: commands get the image's environment, without the
// daemon's configuration or the container's host name, and a PATH when
// the image has none.
func TestBaseEnv(t *testing.T) {
	t.Setenv(ConfigEnv, `{"uid":1000,"gid":1000}`)
	t.Setenv("HOSTNAME", "sandbox")
	t.Setenv("FROM_IMAGE", "yes")
	t.Setenv("PATH", "") // restored when the test ends
	os.Unsetenv("PATH")
	env := baseEnv()
	if _, ok := env[ConfigEnv]; ok || os.Getenv(ConfigEnv) != "" {
		t.Errorf("the daemon's configuration reaches commands")
	}
	if _, ok := env["HOSTNAME"]; ok {
		t.Errorf("HOSTNAME reaches commands")
	}
	if env["FROM_IMAGE"] != "yes" {
		t.Errorf("the image's environment is lost: %v", env)
	}
	if env["PATH"] == "" {
		t.Errorf("no PATH for an image without one")
	}
	t.Setenv("PATH", "/image/bin")
	if env := baseEnv(); env["PATH"] != "/image/bin" {
		t.Errorf("the image's PATH is replaced: %q", env["PATH"])
	}
}

// TestMainReturns: Main returns at once in a process not started as a
// container's entrypoint.
func TestMainReturns(t *testing.T) {
	Main()
}
