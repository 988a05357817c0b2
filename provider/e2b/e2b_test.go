package e2b_test

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/e2b"
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
	"github.com/berth-dev/berth/provider/remote"
)

const testKey = "e2b_k3y7h47mu57n3v3r13ak"

// newAPI starts a fake that fails the test on any spec violation, and
// the API over it.
func newAPI(t *testing.T, opts e2bfake.Options) (*e2bfake.Server, *e2b.API) {
	t.Helper()
	opts.Farm, opts.APIKey = farm, testKey
	f, err := e2bfake.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			t.Errorf("spec violations:\n%s", strings.Join(v, "\n"))
		}
	})
	a, err := e2b.New(e2b.Config{APIURL: f.URL(), SandboxURL: f.SandboxURL(), APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	return f, a
}

func noKey(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), testKey) {
		t.Errorf("the error holds the API key: %v", err)
	}
}

func TestCreateAfterLostAnswer(t *testing.T) {
	f, a := newAPI(t, e2bfake.Options{})
	ctx := t.Context()
	req := remote.CreateRequest{Name: "berth-s1", Labels: map[string]string{"berth.sandbox": "s1"}, Lifetime: time.Minute}
	f.Inject(e2bfake.Fault{Match: e2bfake.Route("POST", "/sandboxes"), Drop: true})
	_, err := a.Create(ctx, req)
	if !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Fatalf("a create whose answer was lost: %v, want retryable", err)
	}
	noKey(t, err)
	m, err := a.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Sandboxes(); len(got) != 1 || got[0] != m.ID || again.ID != m.ID {
		t.Errorf("the fake holds %v; creates answered %s and %s: want one sandbox", got, m.ID, again.ID)
	}
	if n := f.Requests("POST /sandboxes"); n != 1 {
		t.Errorf("%d creates reached E2B, want 1", n)
	}
	if m.Name != req.Name || m.Labels["berth.sandbox"] != "s1" || m.State != remote.MachineRunning {
		t.Errorf("the machine: %+v", m)
	}
	if m.ExpiresAt.After(time.Now().Add(2*time.Minute)) || m.ExpiresAt.Before(time.Now().Add(50*time.Second)) || m.CreatedAt.IsZero() {
		t.Errorf("the machine's times: %v to %v", m.CreatedAt, m.ExpiresAt)
	}
}

func TestCreateRefuses(t *testing.T) {
	f, a := newAPI(t, e2bfake.Options{})
	for _, req := range []remote.CreateRequest{
		{Name: "berth-a", CPU: 2},
		{Name: "berth-a", Memory: 1 << 30},
		{Name: "berth-a", Disk: 1 << 30},
	} {
		if _, err := a.Create(t.Context(), req); !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("%+v: %v, want unsupported", req, err)
		}
	}
	if _, err := a.Create(t.Context(), remote.CreateRequest{Name: "berth-a", Labels: map[string]string{e2b.MetadataName: "x"}}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("a label of the provider's: %v, want bad input", err)
	}
	if got := f.Sandboxes(); len(got) != 0 {
		t.Errorf("refused creates made %v", got)
	}
}

func TestFindListDelete(t *testing.T) {
	f, a := newAPI(t, e2bfake.Options{})
	ctx := t.Context()
	one, err := a.Create(ctx, remote.CreateRequest{Name: "berth-one", Labels: map[string]string{"berth.sandbox": "one", "team": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	two, err := a.Create(ctx, remote.CreateRequest{Name: "berth-two", Labels: map[string]string{"berth.sandbox": "two", "team": "x"}, Image: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := a.Find(ctx, "berth-two"); err != nil || m.ID != two.ID || m.Labels["team"] != "x" || m.Name != "berth-two" {
		t.Errorf("find: %+v, %v", m, err)
	}
	if _, err := a.Find(ctx, "berth-three"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("find of no machine: %v, want not found", err)
	}
	list, err := a.List(ctx, map[string]string{"team": "x"})
	if err != nil || len(list) != 2 {
		t.Errorf("list by team: %+v, %v", list, err)
	}
	list, err = a.List(ctx, map[string]string{"berth.sandbox": "one"})
	if err != nil || len(list) != 1 || list[0].ID != one.ID {
		t.Errorf("list by sandbox: %+v, %v", list, err)
	}
	if err := a.Delete(ctx, one); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, one); err != nil {
		t.Errorf("a second delete: %v, want none", err)
	}
	if _, err := a.Find(ctx, "berth-one"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("find after delete: %v", err)
	}
	if got := f.Sandboxes(); len(got) != 1 || got[0] != two.ID {
		t.Errorf("the fake holds %v, want %s", got, two.ID)
	}
}

// get fetches path from the endpoint.
func get(t *testing.T, ep remote.Endpoint, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", ep.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range ep.Header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return resp.StatusCode, string(b)
}

// startServer uploads the test binary into m and starts it as an HTTP
// server on port, returning its endpoint once it answers, and its pid.
func startServer(t *testing.T, a *e2b.API, m remote.Machine, port int) (remote.Endpoint, string) {
	t.Helper()
	ctx := t.Context()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	const remotePath = "/opt/berth/test-server"
	if err := a.Upload(ctx, m, remotePath, bin); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx, m, []string{remotePath, "-test.run=^$"}, map[string]string{"E2B_TEST_SERVE_PORT": strconv.Itoa(port)}); err != nil {
		t.Fatal(err)
	}
	ep, err := a.Endpoint(ctx, m, port)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, body := get(t, ep, "/pid"); code == http.StatusOK {
			return ep, body
		}
		if time.Now().After(deadline) {
			t.Fatal("the server started in the sandbox never answered")
		}
	}
}

// TestDaemon: an uploaded program, started detached, serves its port
// through E2B's proxy after its Start stream ended; it survives a pause,
// during which the proxy answers 502, and a resume.
func TestDaemon(t *testing.T) {
	_, a := newAPI(t, e2bfake.Options{})
	ctx := t.Context()
	m, err := a.Create(ctx, remote.CreateRequest{Name: "berth-daemon", Lifetime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ep, pid := startServer(t, a, m, 49999)

	if err := a.Pause(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := a.Pause(ctx, m); err != nil {
		t.Errorf("pause of a paused machine: %v", err)
	}
	if got, err := a.Find(ctx, m.Name); err != nil || got.State != remote.MachinePaused {
		t.Errorf("find of a paused machine: %v, %v", got.State, err)
	}
	if code, _ := get(t, ep, "/pid"); code != http.StatusBadGateway {
		t.Errorf("a paused machine's port answered %d, want E2B's 502", code)
	}
	if err := a.KeepAlive(ctx, m, 10*time.Minute); err != nil {
		t.Errorf("keepalive of a paused machine: %v", err)
	}
	if err := a.Resume(ctx, m); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, ep, "/pid"); code != http.StatusOK || body != pid {
		t.Errorf("after resume: %d %q, want the same server, pid %s", code, body, pid)
	}
	if err := a.Upload(ctx, m, "relative/path", strings.NewReader("x")); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("upload to a relative path: %v, want bad input", err)
	}
	if err := a.Start(ctx, m, []string{"/no/such/daemon"}, nil); err == nil {
		t.Error("start of a program that is not there: no error")
	}
}

// TestKeepAlive: a machine kept alive outlives one that was not, whose
// timeout E2B honoured.
func TestKeepAlive(t *testing.T) {
	f, a := newAPI(t, e2bfake.Options{})
	ctx := t.Context()
	kept, err := a.Create(ctx, remote.CreateRequest{Name: "berth-kept", Lifetime: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	left, err := a.Create(ctx, remote.CreateRequest{Name: "berth-left", Lifetime: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.KeepAlive(ctx, kept, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := a.Find(ctx, left.Name); errors.Is(err, errdefs.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a machine past its timeout was not ended")
		}
	}
	m, err := a.Find(ctx, kept.Name)
	if err != nil || m.ExpiresAt.Before(time.Now().Add(4*time.Minute)) {
		t.Errorf("the machine kept alive: %+v, %v", m, err)
	}
	// A shorter keepalive does not cut it short.
	if err := a.KeepAlive(ctx, kept, time.Second); err != nil {
		t.Fatal(err)
	}
	if m, err := a.Find(ctx, kept.Name); err != nil || m.ExpiresAt.Before(time.Now().Add(4*time.Minute)) {
		t.Errorf("after a shorter keepalive: %+v, %v", m, err)
	}
	if got := f.Sandboxes(); len(got) != 1 || got[0] != kept.ID {
		t.Errorf("the fake holds %v", got)
	}
}

func TestVanished(t *testing.T) {
	f, a := newAPI(t, e2bfake.Options{})
	ctx := t.Context()
	m, err := a.Create(ctx, remote.CreateRequest{Name: "berth-gone"})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Vanish(m.ID) {
		t.Fatal("no sandbox to vanish")
	}
	if _, err := a.Find(ctx, m.Name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("find of a vanished machine: %v, want not found", err)
	}
	if err := a.KeepAlive(ctx, m, time.Minute); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("keepalive of a vanished machine: %v, want not found", err)
	}
	if err := a.Start(ctx, m, []string{"true"}, nil); err == nil {
		t.Error("start in a vanished machine: no error")
	}
	if err := a.Delete(ctx, m); err != nil {
		t.Errorf("delete of a vanished machine: %v", err)
	}
}

func TestErrorsHoldNoKey(t *testing.T) {
	f, a := newAPI(t, e2bfake.Options{})
	ctx := t.Context()
	f.Inject(e2bfake.Fault{Status: http.StatusTooManyRequests, RetryAfter: "2"})
	_, err := a.Find(ctx, "berth-x")
	if !errors.Is(err, errdefs.ErrProviderUnavailable) || !strings.Contains(err.Error(), "retry after 2s") {
		t.Errorf("429: %v", err)
	}
	noKey(t, err)
	f.Inject(e2bfake.Fault{Status: http.StatusInternalServerError})
	_, err = a.Create(ctx, remote.CreateRequest{Name: "berth-x"})
	if !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("500: %v", err)
	}
	noKey(t, err)

	wrong, err := e2b.New(e2b.Config{APIURL: f.URL(), SandboxURL: f.SandboxURL(), APIKey: testKey + "x"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Create(ctx, remote.CreateRequest{Name: "berth-x"})
	if !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("a wrong key: %v, want refused", err)
	}
	noKey(t, err)
}

func TestParseConfig(t *testing.T) {
	t.Setenv("E2B_API_KEY", testKey)
	c, err := e2b.ParseConfig(provider.Config{"api-url": "http://127.0.0.1:9", "template": "t1", "max-lifetime": "24h"})
	if err != nil {
		t.Fatal(err)
	}
	if c.APIKey != testKey || c.APIURL != "http://127.0.0.1:9" || c.Template != "t1" || c.MaxLifetime != 24*time.Hour {
		t.Errorf("config %+v", c)
	}

	t.Setenv("OTHER_KEY", "other")
	if c, err := e2b.ParseConfig(provider.Config{"api-key-env": "OTHER_KEY"}); err != nil || c.APIKey != "other" {
		t.Errorf("api-key-env: %v", err)
	}
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte(testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := e2b.ParseConfig(provider.Config{"api-key-file": file}); err != nil || c.APIKey != testKey {
		t.Errorf("api-key-file: %v", err)
	}
	_, err = e2b.ParseConfig(provider.Config{"api-key-file": filepath.Join(t.TempDir(), "none")})
	if !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("a missing key file: %v", err)
	}
	t.Setenv("E2B_API_KEY", "")
	if _, err := e2b.ParseConfig(nil); !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("no key: %v, want refused", err)
	}
	if _, err := e2b.ParseConfig(provider.Config{"api-key": testKey}); !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), testKey) {
		t.Errorf("a key in the settings: %v, want refused, and not quoted", err)
	}
}

// echoing is a transport that records every request's query and, when
// echo is set, answers 401 quoting the request's key, as a careless
// proxy might.
type echoing struct {
	echo    bool
	queries []string
}

func (e *echoing) RoundTrip(r *http.Request) (*http.Response, error) {
	e.queries = append(e.queries, r.URL.Path+"?"+r.URL.RawQuery)
	if e.echo {
		body := `{"code":401,"message":"key ` + r.Header.Get("X-API-Key") + ` is not valid"}`
		return &http.Response{StatusCode: http.StatusUnauthorized, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestCheck: the provider as a host opens it is a provider.Checker
// whose Check is one listing of one sandbox: nil while E2B accepts the
// key, a refusal (ErrProviderAuth) for a wrong key, E2B out of reach
// (ErrProviderUnavailable) once it is gone; no error holds the key.
func TestCheck(t *testing.T) {
	f, _ := newAPI(t, e2bfake.Options{})
	check := func(key string) error {
		t.Helper()
		t.Setenv(e2b.DefaultAPIKeyEnv, key)
		p, err := provider.Open(t.Context(), e2b.Name, provider.Config{"api-url": f.URL(), "sandbox-url": f.SandboxURL()})
		if err != nil {
			t.Fatal(err)
		}
		c, ok := p.(provider.Checker)
		if !ok {
			t.Fatalf("provider e2b (%T) is no provider.Checker", p)
		}
		err = c.Check(t.Context())
		if err != nil && strings.Contains(err.Error(), key) {
			t.Errorf("the error holds the API key: %v", err)
		}
		return err
	}

	before := f.Requests("GET /v2/sandboxes")
	if err := check(testKey); err != nil {
		t.Errorf("Check with the key E2B accepts: %v", err)
	}
	if n := f.Requests("GET /v2/sandboxes") - before; n != 1 {
		t.Errorf("Check made %d listings, want 1", n)
	}
	if err := check("e2b_wrongk3y"); !errors.Is(err, errdefs.ErrProviderAuth) || errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("Check with a wrong key: %v, want refused", err)
	}

	// One page of one: the cheapest call, and a key echoed is not repeated.
	rt := &echoing{}
	a, err := e2b.New(e2b.Config{APIURL: f.URL(), APIKey: testKey, HTTPClient: &http.Client{Transport: rt}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(rt.queries) != 1 || rt.queries[0] != "/v2/sandboxes?limit=1" {
		t.Errorf("Check asked %q, want one /v2/sandboxes?limit=1", rt.queries)
	}
	rt.echo = true
	err = a.Check(t.Context())
	if !errors.Is(err, errdefs.ErrProviderAuth) || !strings.Contains(err.Error(), "is not valid") {
		t.Errorf("Check answered 401: %v, want refused, with E2B's words", err)
	}
	noKey(t, err)

	f.Close()
	if err := check(testKey); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("Check with E2B gone: %v, want unavailable", err)
	}
}
