package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// serveTCP runs a daemon with token on a loopback TCP port and returns
// its base URL.
func serveTCP(t *testing.T, token string) (*Server, string) {
	t.Helper()
	s, err := New(Config{Workspace: t.TempDir(), UID: os.Geteuid(), GID: os.Getegid(),
		Env: map[string]string{"PATH": "/usr/bin:/bin"}, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	return s, "http://" + ln.Addr().String()
}

// countingTransport counts the round trips and the connections dialled
// through it.
type countingTransport struct {
	trips, dials atomic.Int64
	rt           http.RoundTripper
}

func newCountingTransport() *countingTransport {
	ct := &countingTransport{}
	var d net.Dialer
	ct.rt = &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 8,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ct.dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}}
	return ct
}

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ct.trips.Add(1)
	return ct.rt.RoundTrip(r)
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// TestTokenRefused: a daemon with a token answers every request that
// lacks it, or carries another, with 401 and does nothing: the command
// it was asked to run never runs, and the client's error says
// ProviderAuth without either token in it.
func TestTokenRefused(t *testing.T) {
	const token = "s3cret-token-value"
	s, base := serveTCP(t, token)
	for _, tt := range []struct {
		name   string
		header http.Header
	}{
		{"none", nil},
		{"wrong", bearer("not-the-token")},
		{"prefix", bearer(token[:len(token)-1])},
		{"longer", bearer(token + "x")},
		{"basic", http.Header{"Authorization": {"Basic " + token}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewHTTPClient(base, tt.header, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Exec(t.Context(), provider.ExecRequest{Shell: "echo ran > ran"})
			if !errors.Is(err, errdefs.ErrProviderAuth) {
				t.Fatalf("Exec with the %s token: %v, want ErrProviderAuth", tt.name, err)
			}
			if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "not-the-token") {
				t.Errorf("the error carries a token: %v", err)
			}
			if _, err := os.Stat(filepath.Join(s.cfg.Workspace, "ran")); err == nil {
				t.Errorf("the command ran without the token")
			}
			if _, err := c.Health(t.Context()); !errors.Is(err, errdefs.ErrProviderAuth) {
				t.Errorf("Health with the %s token: %v, want ErrProviderAuth", tt.name, err)
			}
			// Raw, as anyone on the network would ask.
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+routeFile+"?path=x", nil)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with the %s token: %s, want 401", routeFile, tt.name, resp.Status)
			}
		})
	}
}

// TestHTTPClient: with the token, the daemon serves over TCP through a
// client of NewHTTPClient, one round trip per operation on one kept-alive
// connection.
func TestHTTPClient(t *testing.T) {
	const token = "another-s3cret"
	_, base := serveTCP(t, token)
	ct := newCountingTransport()
	c, err := NewHTTPClient(base+"/", bearer(token), ct)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteFile(t.Context(), "f", strings.NewReader("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var out bytes.Buffer
		res, err := c.Exec(t.Context(), provider.ExecRequest{Argv: []string{"cat", "f"}, Stdout: &out})
		if err != nil || res.ExitCode != 0 || out.String() != "data" {
			t.Fatalf("exec %d: %v, exit %d, out %q", i, err, res.ExitCode, out.String())
		}
	}
	rc, err := c.ReadFile(t.Context(), "f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "data" {
		t.Errorf("ReadFile = %q", b)
	}
	if got := ct.trips.Load(); got != 5 {
		t.Errorf("write, 3 execs and a read took %d round trips, want 5", got)
	}
	if got := ct.dials.Load(); got != 1 {
		t.Errorf("write, 3 execs and a read dialled %d connections, want 1", got)
	}
}

// TestHTTPClientURL: a base URL that is not http or https is refused.
func TestHTTPClientURL(t *testing.T) {
	for _, u := range []string{"", "unix:///x", "ftp://h/", "http://", "::"} {
		if _, err := NewHTTPClient(u, nil, nil); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("NewHTTPClient(%q): %v, want ErrBadInput", u, err)
		}
	}
}
