package warmclaim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/sandboxd"
)

// daemon serves a held-back sandboxd server and the control socket, as
// a warm daemon does, with take as the claim's handler.
func daemon(t *testing.T, take func(Claim) error) *http.Client {
	t.Helper()
	dir := t.TempDir()
	srv, err := sandboxd.New(sandboxd.Config{Workspace: dir, Deferred: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(filepath.Join(dir, "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctlPath := filepath.Join(dir, "ctl.sock")
	ctl, err := Listen(ctlPath)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(srv, ln, ctl, take) }()
	t.Cleanup(func() {
		ln.Close()
		ctl.Close()
		<-served
	})
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", ctlPath)
		},
	}}
}

func TestClaimedOnce(t *testing.T) {
	var (
		mu    sync.Mutex
		taken []Claim
	)
	hc := daemon(t, func(c Claim) error {
		mu.Lock()
		defer mu.Unlock()
		taken = append(taken, c)
		return nil
	})
	const claimers = 16
	errs := make([]error, claimers)
	var wg sync.WaitGroup
	for i := range claimers {
		wg.Go(func() {
			errs[i] = Send(t.Context(), hc, Claim{Env: map[string]string{"N": strconv.Itoa(i)}, Dir: "w", UserProcesses: 7})
		})
	}
	wg.Wait()

	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("claims %d and %d both succeeded", won, i)
		case err == nil:
			won = i
		case !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "claimed already"):
			t.Errorf("claim %d: %v, want 409 claimed already", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no claim succeeded")
	}
	if len(taken) != 1 {
		t.Fatalf("take called %d times, want once", len(taken))
	}
	if c := taken[0]; c.Env["N"] != strconv.Itoa(won) || c.Dir != "w" || c.UserProcesses != 7 {
		t.Errorf("take got %+v, want the winning claim %d", c, won)
	}
}

func TestBadClaims(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int
	}{
		{"not json", "{", http.StatusBadRequest},
		{"wrong type", `{"env": 3}`, http.StatusBadRequest},
		{"valid", `{"env": {"A": "1"}}`, http.StatusNoContent},
		{"after the claim", `{"env": {"A": "2"}}`, http.StatusConflict},
	}
	var taken []Claim
	hc := daemon(t, func(c Claim) error { taken = append(taken, c); return nil })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := hc.Post("http://daemon"+Path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
		})
	}
	if len(taken) != 1 || taken[0].Env["A"] != "1" {
		t.Errorf("taken %+v, want only the valid claim: a malformed one must not use the claim up", taken)
	}
}

func TestTakeFails(t *testing.T) {
	hc := daemon(t, func(Claim) error { return errors.New("no such dir") })
	err := Send(t.Context(), hc, Claim{})
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "no such dir") {
		t.Errorf("Send = %v, want the daemon's 500 and its reason", err)
	}
}

func TestListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ctl.sock")
	// What a daemon before this one left.
	if err := os.WriteFile(path, []byte("stale"), 0o666); err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale file: %v", err)
	}
	defer ln.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket of 0600", fi.Mode())
	}
	if _, err := Listen(filepath.Join(dir, "none", "ctl.sock")); err == nil {
		t.Error("Listen in a missing directory succeeded")
	}
}

const applyEnv = "WARMCLAIM_TEST_APPLY"

// TestMain lets the test binary be a claimed daemon: Apply exits the
// process at the claim's end of life, so it runs in a child.
func TestMain(m *testing.M) {
	if nproc := os.Getenv(applyEnv); nproc != "" {
		n, _ := strconv.ParseInt(nproc, 10, 64)
		srv, err := sandboxd.New(sandboxd.Config{Workspace: os.TempDir(), Deferred: true})
		if err == nil {
			err = Apply(srv, Claim{ExpiresAt: time.Now().Add(100 * time.Millisecond), UserProcesses: n}, nil)
		}
		if err != nil {
			fmt.Println("apply:", err)
			os.Exit(2)
		}
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			os.Exit(3)
		}
		fmt.Println(lim.Cur, lim.Max)
		select {} // until the end of life
	}
	os.Exit(m.Run())
}

func TestApplyEndsTheDaemonAndLimitsProcesses(t *testing.T) {
	var before unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &before); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		nproc int64
		want  string
	}{
		{"limited", 37, "37 37"},
		{"unlimited", 0, fmt.Sprint(before.Cur, before.Max)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), applyEnv+"="+strconv.FormatInt(tt.nproc, 10))
			out, err := cmd.Output()
			if errors.Is(err, syscall.ECHILD) && ctx.Err() == nil {
				// Another test's sandboxd server in this process reaps
				// every child, as a daemon's reaper must: the status is
				// lost, but the context did not kill the child, so it
				// ended by itself.
				err = nil
			}
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
					t.Fatalf("the daemon did not end at its end of life: killed (%v), output %q", err, out)
				}
				t.Fatalf("daemon: %v, output %q", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tt.want {
				t.Errorf("process limit %q, want %q", got, tt.want)
			}
		})
	}
}
