package daemonpause

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-dev/berth/sandboxd"
)

var errUnreachable = errors.New("daemon unreachable")

// check stands for the provider's conversion of a failure to reach the
// daemon.
func check(err error) error { return errors.Join(errUnreachable, err) }

// serve starts a real sandboxd server on a unix socket and returns it
// with a client for it.
func serve(t *testing.T) (*sandboxd.Server, *sandboxd.Client) {
	t.Helper()
	dir := t.TempDir()
	srv, err := sandboxd.New(sandboxd.Config{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { ln.Close(); <-served })
	return srv, dialer(sock)
}

func dialer(sock string) *sandboxd.Client {
	return sandboxd.NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
}

func held(srv *sandboxd.Server) (h bool) {
	srv.Hold(func(held bool) { h = held })
	return h
}

func TestPauseAndResume(t *testing.T) {
	srv, c := serve(t)
	marker := filepath.Join(t.TempDir(), "paused")
	steps := []struct {
		name  string
		pause bool
	}{
		{"pause", true},
		{"pause again", true},
		{"resume", false},
		{"resume again", false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := Set(t.Context(), c, marker, st.pause, check); err != nil {
				t.Fatalf("Set(%v): %v", st.pause, err)
			}
			if got := Paused(marker); got != st.pause {
				t.Errorf("Paused = %v, want %v", got, st.pause)
			}
			if got := held(srv); got != st.pause {
				t.Errorf("the daemon holds the sandbox stopped: %v, want %v", got, st.pause)
			}
		})
	}
}

func TestUnreachableDaemon(t *testing.T) {
	gone := dialer(filepath.Join(t.TempDir(), "none.sock"))
	tests := []struct {
		name       string
		markedFrom bool // the marker is there before
		pause      bool
		wantMarker bool
	}{
		// A pause that failed leaves the sandbox running: no marker.
		{"pause", false, true, false},
		// A resume that failed leaves it paused: the marker stays.
		{"resume", true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "paused")
			if tt.markedFrom {
				if err := os.WriteFile(marker, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := Set(t.Context(), gone, marker, tt.pause, check)
			if !errors.Is(err, errUnreachable) {
				t.Errorf("Set = %v, want the error through check", err)
			}
			if got := Paused(marker); got != tt.wantMarker {
				t.Errorf("Paused = %v, want %v", got, tt.wantMarker)
			}
		})
	}
}

func TestMarkerUnwritable(t *testing.T) {
	srv, c := serve(t)
	marker := filepath.Join(t.TempDir(), "none", "paused")
	if err := Set(t.Context(), c, marker, true, check); err == nil || errors.Is(err, errUnreachable) {
		t.Errorf("Set = %v, want the marker's write error", err)
	}
	if held(srv) {
		t.Error("the daemon paused though the marker could not be written: operations would not know")
	}
}
