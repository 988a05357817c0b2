package modal_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/modal"
	"github.com/berth-dev/berth/provider/modal/modalfake"
	"github.com/berth-dev/berth/provider/remote"
)

func newAPI(t *testing.T, f *modalfake.Server, cfg modal.Config) *modal.API {
	t.Helper()
	cfg.ServerURL, cfg.TunnelCA = f.URL(), f.CAFile()
	if cfg.TokenID == "" {
		cfg.TokenID, cfg.TokenSecret = testTokenID, testTokenSecret
	}
	a, err := modal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func create(t *testing.T, a *modal.API, name string, labels map[string]string) remote.Machine {
	t.Helper()
	m, err := a.Create(t.Context(), remote.CreateRequest{Name: name, Labels: labels, Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Delete(t.Context(), m) })
	return m
}

// TestCreateAfterLostAnswer: a Create whose answer was lost is retried
// (by the SDK, with the same name) and returns the sandbox the first
// call made; Modal holds one. Deleting it twice is no error.
func TestCreateAfterLostAnswer(t *testing.T) {
	f := newFake(t, modalfake.Options{})
	a := newAPI(t, f, modal.Config{})
	f.Inject(modalfake.Fault{Method: "SandboxCreateV2", Drop: true})
	before := time.Now().Add(-time.Second)
	req := remote.CreateRequest{Name: "berth-lost", Labels: map[string]string{"berth.sandbox": "lost"}, Lifetime: time.Hour}
	m, err := a.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if n := f.Sandboxes(); n != 1 {
		t.Errorf("after a lost answer Modal holds %d sandboxes, want 1", n)
	}
	if n := f.Requests("SandboxCreateV2"); n != 2 {
		t.Errorf("%d creates, want 2 (the lost one, the retry)", n)
	}
	if m.Name != req.Name || m.Labels["berth.sandbox"] != "lost" || m.State != remote.MachineRunning || m.CreatedAt.Before(before) {
		t.Errorf("the retried Create's machine: %+v", m)
	}
	// A Create again, a worker's retry of its own, finds it too.
	m2, err := a.Create(t.Context(), req)
	if err != nil || m2.ID != m.ID || f.Sandboxes() != 1 {
		t.Errorf("a second Create of the name: %+v, %v; %d sandboxes", m2, err, f.Sandboxes())
	}
	if err := a.Delete(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(t.Context(), m); err != nil {
		t.Errorf("deleting a sandbox twice: %v, want nil", err)
	}
	if f.Sandboxes() != 0 {
		t.Error("the sandbox runs on after Delete")
	}
}

// TestFindAndList: Find answers by berth's name, List by labels, with
// the labels and times kept as tags; the tags of berth's own are not
// labels; a vanished sandbox is not found; List reads every page.
func TestFindAndList(t *testing.T) {
	f := newFake(t, modalfake.Options{PageSize: 2})
	a := newAPI(t, f, modal.Config{})
	before := time.Now().Add(-time.Second)
	m1 := create(t, a, "berth-find-1", map[string]string{"berth.sandbox": "find-1", "berth.owner": "t", "berth.lifetime": "3600"})
	create(t, a, "berth-find-2", map[string]string{"berth.sandbox": "find-2", "berth.owner": "other"})
	for i := 3; i <= 5; i++ {
		create(t, a, "berth-find-"+strconv.Itoa(i), map[string]string{"berth.sandbox": "find-" + strconv.Itoa(i), "berth.owner": "many"})
	}
	got, err := a.Find(t.Context(), "berth-find-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != m1.ID || got.Labels["berth.owner"] != "t" || got.CreatedAt.Before(before) || got.State != remote.MachineRunning {
		t.Errorf("Find: %+v", got)
	}
	if want := got.CreatedAt.Add(time.Hour); !got.ExpiresAt.Equal(want) {
		t.Errorf("Find: expires at %v, want %v (its timeout)", got.ExpiresAt, want)
	}
	if _, ok := got.Labels["berth.name"]; ok {
		t.Error("Find's labels hold berth's own tags")
	}
	if _, err := a.Find(t.Context(), "berth-none"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Find of no sandbox: %v, want not found", err)
	}
	list, err := a.List(t.Context(), map[string]string{"berth.owner": "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != m1.ID || list[0].Name != "berth-find-1" {
		t.Errorf("List by owner t: %+v, want berth-find-1 alone", list)
	}
	list, err = a.List(t.Context(), map[string]string{"berth.owner": "many"})
	if err != nil || len(list) != 3 {
		t.Errorf("List over pages of 2: %d machines, %v; want 3", len(list), err)
	}
	if err := f.Vanish(m1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Find(t.Context(), "berth-find-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Find of a vanished sandbox: %v, want not found", err)
	}
}

// TestSizes: CPU and memory reach Modal as requests (milli-CPU, MiB
// rounded up), a lifetime as the timeout capped at 24 h; a disk size
// is not Modal's.
func TestSizes(t *testing.T) {
	f := newFake(t, modalfake.Options{Quota: modalfake.Quota{MilliCPU: 1500, MemoryMiB: 1025}})
	a := newAPI(t, f, modal.Config{})
	_, err := a.Create(t.Context(), remote.CreateRequest{Name: "berth-size-disk", Disk: 1 << 30})
	if !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("a disk size: %v, want ErrUnsupported", err)
	}
	m, err := a.Create(t.Context(), remote.CreateRequest{Name: "berth-size", CPU: 1.5, Memory: 1<<30 + 1, Lifetime: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Delete(t.Context(), m) })
	cpu, mem, timeout := f.Resources(m.ID)
	if cpu != 1500 || mem != 1025 || timeout != 24*time.Hour {
		t.Errorf("1.5 cores, 1 GiB + 1 byte, 48 h: Modal has %d milli-CPU, %d MiB, timeout %v; want 1500, 1025, 24h", cpu, mem, timeout)
	}
	if d := m.ExpiresAt.Sub(m.CreatedAt); d != 24*time.Hour {
		t.Errorf("ExpiresAt is %v after CreatedAt, want Modal's 24 h", d)
	}
	_, err = a.Create(t.Context(), remote.CreateRequest{Name: "berth-size-more", CPU: 0.25})
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("past the quota: %v, want ErrQuota", err)
	}
}

// TestErrors: a refused token, a rate limit, a service unavailable and
// a bad request reach the caller as berth's kinds, in one line, with no
// token in them nor in the logs.
func TestErrors(t *testing.T) {
	f := newFake(t, modalfake.Options{})
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	bad := newAPI(t, f, modal.Config{TokenID: testTokenID, TokenSecret: "as-wrong-secret-123", Logger: log})
	_, err := bad.Create(t.Context(), remote.CreateRequest{Name: "berth-err-auth"})
	if !errors.Is(err, errdefs.ErrProviderAuth) || strings.Contains(err.Error(), "as-wrong-secret-123") || strings.Contains(err.Error(), "\n") {
		t.Errorf("a wrong secret: %v, want ErrProviderAuth in one line without the token", err)
	}
	if err := bad.Check(t.Context()); !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("Check with a wrong secret: %v", err)
	}
	a := newAPI(t, f, modal.Config{Logger: log})
	if err := a.Check(t.Context()); err != nil {
		t.Errorf("Check: %v", err)
	}
	f.Inject(modalfake.Fault{Method: "SandboxListV2", Code: codes.ResourceExhausted, Message: "rate limit exceeded"})
	if _, err := a.List(t.Context(), map[string]string{"berth.owner": "x"}); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("a rate limit: %v, want ErrProviderUnavailable", err)
	}
	f.Inject(modalfake.Fault{Method: "SandboxCreateV2", Code: codes.InvalidArgument, Message: "bad\nrequest " + testTokenSecret})
	_, err = a.Create(t.Context(), remote.CreateRequest{Name: "berth-err-bad"})
	if !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), testTokenSecret) {
		t.Errorf("InvalidArgument: %v, want ErrBadInput in one line without the token", err)
	}
	f.Inject(modalfake.Fault{Method: "SandboxGetFromNameV2", Code: codes.Unavailable, Times: 10})
	if _, err := a.Find(t.Context(), "berth-x"); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("Unavailable past the SDK's retries: %v, want ErrProviderUnavailable", err)
	}
	for _, s := range []string{testTokenSecret, "as-wrong-secret-123"} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the logs hold the token's secret %q", s)
		}
	}
	f.Close()
	if err := a.Check(t.Context()); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("Check of a service gone: %v, want ErrProviderUnavailable", err)
	}
}

// TestStartEndpoint: a file uploaded is executable, a command started
// outlives the call, with the environment given (in no argv), and its
// port answers through the tunnel, with the fake's CA trusted.
func TestStartEndpoint(t *testing.T) {
	f := newFake(t, modalfake.Options{})
	a := newAPI(t, f, modal.Config{Port: 8088})
	m := create(t, a, "berth-start", nil)
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	const bin = "/opt/berth/test/server"
	if err := a.Upload(t.Context(), m, bin, self); err != nil {
		t.Fatal(err)
	}
	if err := a.Upload(t.Context(), m, bin+"-big", io.LimitReader(zeros{}, 64<<20+1)); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("an upload past 64 MiB: %v, want ErrBadInput", err)
	}
	if err := a.Start(t.Context(), m, []string{bin, "-test.run=^$"}, map[string]string{serveEnv: "8088", "SECRET_THING": "s3cr3t value"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Endpoint(t.Context(), m, 9999); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("a port with no tunnel: %v, want ErrUnsupported", err)
	}
	ep, err := a.Endpoint(t.Context(), m, 8088)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ep.URL, "https://") || ep.Transport == nil {
		t.Errorf("endpoint %+v: want an https URL and a transport trusting the CA", ep)
	}
	hc := &http.Client{Transport: ep.Transport, Timeout: 5 * time.Second}
	var body string
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(100 * time.Millisecond) {
		resp, err := hc.Get(ep.URL + "/pid")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			body = string(b)
			break
		}
	}
	if _, uid, ok := strings.Cut(body, " "); !ok || uid != "0" {
		t.Fatalf("the server started in the sandbox answered %q through its tunnel, want its pid and uid 0", body)
	}
	mc, err := farm.Machine(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := mc.HostPIDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if bytes.Contains(b, []byte("s3cr3t")) {
			t.Errorf("process %d's argv holds the environment: %q", p, b)
		}
	}
	before := f.Requests("SandboxGetTunnelsV2")
	if _, err := a.Endpoint(t.Context(), m, 8088); err != nil {
		t.Fatal(err)
	}
	if f.Requests("SandboxGetTunnelsV2") != before {
		t.Error("a second Endpoint asked Modal again")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestProviderCheck: the registered provider checks Modal with one
// call past the token's exchange: ready with the token, refused with a
// wrong one, unreachable when the service is gone; the token in no
// error.
func TestProviderCheck(t *testing.T) {
	f := newFake(t, modalfake.Options{})
	pc := settings(t, f)
	check := func() error {
		t.Helper()
		c, ok := openProvider(t, pc).(provider.Checker)
		if !ok {
			t.Fatal("the modal provider is not a provider.Checker")
		}
		return c.Check(t.Context())
	}
	before := f.Requests("AppGetOrCreate")
	if err := check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if n := f.Requests("AppGetOrCreate") - before; n != 1 {
		t.Errorf("Check made %d app look-ups, want 1", n)
	}
	if f.Sandboxes() != 0 {
		t.Error("Check made a sandbox")
	}
	t.Setenv(modal.DefaultTokenSecretEnv, "as-refused-secret")
	if err := check(); !errors.Is(err, errdefs.ErrProviderAuth) || strings.Contains(err.Error(), "as-refused-secret") {
		t.Errorf("Check with a wrong token: %v, want ErrProviderAuth without the token", err)
	}
	f.Close()
	if err := check(); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("Check of a service gone: %v, want ErrProviderUnavailable", err)
	}
}

// TestServerURLScoped: APIs made at once with server URLs of their own
// each reach their own server, and the environment is left as it was.
func TestServerURLScoped(t *testing.T) {
	f1, f2 := newFake(t, modalfake.Options{}), newFake(t, modalfake.Options{})
	t.Setenv("MODAL_SERVER_URL", "http://127.0.0.1:1")
	apis := make([]*modal.API, 8)
	errs := make(chan error)
	for i := range apis {
		go func() {
			f := f1
			if i%2 == 1 {
				f = f2
			}
			var err error
			apis[i], err = modal.New(modal.Config{ServerURL: f.URL(), TokenID: testTokenID, TokenSecret: testTokenSecret})
			errs <- err
		}()
	}
	for range apis {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range apis {
		defer a.Close()
	}
	for _, a := range apis {
		if err := a.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n1, n2 := f1.Requests("AppGetOrCreate"), f2.Requests("AppGetOrCreate"); n1 != 4 || n2 != 4 {
		t.Errorf("checks reached the fakes %d and %d times, want 4 each", n1, n2)
	}
	if v := os.Getenv("MODAL_SERVER_URL"); v != "http://127.0.0.1:1" {
		t.Errorf("$MODAL_SERVER_URL is %q after, want it as it was", v)
	}
}
