package dockerinit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
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

// TestMain is the test binary as berth-sandboxd is: Main first, so that
// the binary started with Arg is the daemon.
func TestMain(m *testing.M) {
	Main()
	if os.Getenv(childEnv) != "" {
		fmt.Println("Main returned in a process started with " + Arg)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// childEnv marks the daemons TestMainReturns starts: one whose Main
// returns must not run the tests again.
const childEnv = "BERTH_DOCKERINIT_TEST_CHILD"

// TestMainReturns: Main returns at once in a process not started as a
// container's entrypoint (this one, whose first argument is a test
// flag), and runs the daemon in one that was: started with Arg, this
// test's binary refuses a configuration without the sandbox user, or
// with root as that user, in one line, exit 1, before it serves.
func TestMainReturns(t *testing.T) {
	Main()
	for _, tt := range []struct{ name, config, want string }{
		{"no configuration", "", "berth-sandboxd: read " + ConfigEnv},
		{"root", `{"uid":0,"gid":0}`, "berth-sandboxd: " + ConfigEnv + ": the sandbox user must not be root"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], Arg)
			cmd.Env = append(os.Environ(), ConfigEnv+"="+tt.config, childEnv+"=1")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("the daemon with %s %q: %v, want exit 1; output %q", ConfigEnv, tt.config, err, out)
			}
			if msg := strings.TrimSpace(string(out)); !strings.HasPrefix(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("the daemon with %s %q said %q, want one line starting %q", ConfigEnv, tt.config, msg, tt.want)
			}
		})
	}
}
