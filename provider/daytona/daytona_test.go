package daytona_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/daytona"
	"github.com/berth-dev/berth/provider/daytona/daytonafake"
	"github.com/berth-dev/berth/provider/remote"
)

func newAPI(t *testing.T, f *daytonafake.Server, cfg daytona.Config) *daytona.API {
	t.Helper()
	cfg.APIURL = f.APIURL()
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	a, err := daytona.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func create(t *testing.T, a *daytona.API, name string) remote.Machine {
	t.Helper()
	m, err := a.Create(t.Context(), remote.CreateRequest{Name: name, Labels: map[string]string{"berth.sandbox": name, "berth.owner": "t"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Delete(t.Context(), m) })
	return m
}

// TestCreateAfterLostAnswer: a Create whose answer was lost, retried,
// returns the sandbox the first call made; Daytona holds one.
func TestCreateAfterLostAnswer(t *testing.T) {
	f := newFake(t, daytonafake.Options{})
	a := newAPI(t, f, daytona.Config{})
	f.Inject(daytonafake.Fault{Op: "POST /sandbox", Drop: true})
	req := remote.CreateRequest{Name: "b-lost-answer", Labels: map[string]string{"berth.sandbox": "b-lost-answer"}}
	if _, err := a.Create(t.Context(), req); err == nil {
		t.Fatal("a Create whose answer was lost succeeded")
	} else if !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Fatalf("a lost answer: %v, want ErrProviderUnavailable (retried)", err)
	}
	m, err := a.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Sandboxes()); n != 1 {
		t.Errorf("after a retried Create the fake holds %d sandboxes, want 1", n)
	}
	if f.State(m.ID) != "started" || m.State != remote.MachineRunning || m.Name != req.Name {
		t.Errorf("the retried Create's machine: %+v, fake state %q", m, f.State(m.ID))
	}
	if err := a.Delete(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(t.Context(), m); err != nil {
		t.Errorf("deleting a sandbox twice: %v, want nil", err)
	}
}

// TestFindAndList: Find answers by berth's name only, List by labels,
// with the labels and times Daytona keeps; a vanished sandbox is not
// found.
func TestFindAndList(t *testing.T) {
	f := newFake(t, daytonafake.Options{})
	a := newAPI(t, f, daytona.Config{})
	before := time.Now().Add(-time.Second)
	m1 := create(t, a, "b-find-1")
	m2, err := a.Create(t.Context(), remote.CreateRequest{Name: "b-find-2", Labels: map[string]string{"berth.sandbox": "b-find-2", "berth.owner": "other"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Delete(t.Context(), m2) })
	got, err := a.Find(t.Context(), "b-find-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != m1.ID || got.Labels["berth.owner"] != "t" || got.CreatedAt.Before(before) || got.State != remote.MachineRunning {
		t.Errorf("Find: %+v", got)
	}
	if _, ok := got.Labels["code-toolbox-language"]; ok {
		t.Error("Find's labels hold the SDK's own")
	}
	if _, err := a.Find(t.Context(), m1.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Find by Daytona's id: %v, want not found (names are berth's)", err)
	}
	list, err := a.List(t.Context(), map[string]string{"berth.owner": "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != m1.ID {
		t.Errorf("List by owner t: %+v, want b-find-1 alone", list)
	}
	f.Vanish(m1.ID)
	if _, err := a.Find(t.Context(), "b-find-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Find of a vanished sandbox: %v, want not found", err)
	}
}

// TestSizes: a sandbox from an image is sized in whole cores and GiB,
// rounded up; one from a snapshot cannot be, and says so.
func TestSizes(t *testing.T) {
	f := newFake(t, daytonafake.Options{})
	a := newAPI(t, f, daytona.Config{Snapshot: "daytona-small"})
	_, err := a.Create(t.Context(), remote.CreateRequest{Name: "b-size-snap", CPU: 2, Memory: 1 << 30})
	if !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("sizes with a snapshot: %v, want ErrUnsupported", err)
	}
	m, err := a.Create(t.Context(), remote.CreateRequest{Name: "b-size-img", Image: "python:3.12", CPU: 1.5, Memory: 1<<30 + 1, Disk: 3 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Delete(t.Context(), m) })
	cpu, mem, disk := f.Resources(m.ID)
	if cpu != 2 || mem != 2 || disk != 3 {
		t.Errorf("a sandbox of 1.5 cores, 1 GiB + 1 byte, 3 GiB: Daytona has %d cores, %d GiB, %d GiB disk; want 2, 2, 3", cpu, mem, disk)
	}
}

// TestErrors: a refused key, the organization's quota and a rate limit
// reach the caller as berth's kinds, in one line, with no key.
func TestErrors(t *testing.T) {
	f := newFake(t, daytonafake.Options{Quota: daytonafake.Quota{CPU: 1, MemoryGiB: 1, DiskGiB: 3}})
	bad := newAPI(t, f, daytona.Config{APIKey: "dtn_wrong_key"})
	_, err := bad.Create(t.Context(), remote.CreateRequest{Name: "b-err-auth"})
	if !errors.Is(err, errdefs.ErrProviderAuth) || strings.Contains(err.Error(), "dtn_wrong_key") || strings.Contains(err.Error(), "\n") {
		t.Errorf("a wrong key: %v, want ErrProviderAuth in one line without the key", err)
	}
	if err := bad.Check(t.Context()); !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("Check with a wrong key: %v", err)
	}
	a := newAPI(t, f, daytona.Config{Image: "python:3.12"})
	if err := a.Check(t.Context()); err != nil {
		t.Errorf("Check: %v", err)
	}
	_, err = a.Create(t.Context(), remote.CreateRequest{Name: "b-err-quota", CPU: 4})
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("past the quota: %v, want ErrQuota", err)
	}
	f.Inject(daytonafake.Fault{Op: "GET /sandbox/paginated", Status: http.StatusTooManyRequests, RetryAfter: "3"})
	_, err = a.List(t.Context(), map[string]string{"berth.owner": "x"})
	var de *daytona.Error
	if !errors.Is(err, errdefs.ErrProviderUnavailable) || !errors.As(err, &de) || de.RetryAfter != 3*time.Second {
		t.Errorf("a 429: %v, want ErrProviderUnavailable with Retry-After 3s", err)
	}
	f.Close()
	if err := a.Check(t.Context()); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("Check of a service gone: %v, want ErrProviderUnavailable", err)
	}
}

// TestAutoStop: Daytona's auto-stop, which looks only at API activity,
// stops a sandbox left alone, and not one kept alive; with no auto-stop
// set, berth's sandboxes are made with it off.
func TestAutoStop(t *testing.T) {
	const minute = time.Second
	f := newFake(t, daytonafake.Options{Minute: minute})
	off := newAPI(t, f, daytona.Config{})
	m0 := create(t, off, "b-auto-off")
	a := newAPI(t, f, daytona.Config{AutoStop: time.Minute})
	left := create(t, a, "b-auto-left")
	kept := create(t, a, "b-auto-kept")
	if kept.ExpiresAt.IsZero() || m0.ExpiresAt.IsZero() == false {
		t.Errorf("ExpiresAt with auto-stop %v, without %v", kept.ExpiresAt, m0.ExpiresAt)
	}
	deadline := time.Now().Add(3 * minute)
	for time.Now().Before(deadline) {
		if err := a.KeepAlive(t.Context(), kept, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(minute / 4)
	}
	if s := f.State(left.ID); s != "stopped" && s != "stopping" {
		t.Errorf("a sandbox left alone past its auto-stop is %q, want stopped", s)
	}
	if s := f.State(kept.ID); s != "started" {
		t.Errorf("a sandbox kept alive is %q, want started", s)
	}
	if s := f.State(m0.ID); s != "started" {
		t.Errorf("a sandbox made with auto-stop off is %q, want started", s)
	}
	got, err := a.Find(t.Context(), "b-auto-left")
	if err != nil || got.State != remote.MachineStopped {
		t.Errorf("Find of the stopped sandbox: %+v, %v; want stopped", got, err)
	}
}

// TestStartEndpoint: a file uploaded is executable, a command started
// outlives the call, runs as root with the environment given
// (in no argv), and its port answers through the preview URL.
func TestStartEndpoint(t *testing.T) {
	f := newFake(t, daytonafake.Options{})
	a := newAPI(t, f, daytona.Config{})
	m := create(t, a, "b-start")
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
	if err := a.Start(t.Context(), m, []string{bin, "-test.run=^$"}, map[string]string{"DAYTONA_TEST_SERVE_PORT": "8088", "SECRET_THING": "s3cr3t value"}); err != nil {
		t.Fatal(err)
	}
	ep, err := a.Endpoint(t.Context(), m, 8088)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", ep.URL+"/pid", nil)
		req.Header = ep.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
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
	pid, uid, ok := strings.Cut(body, " ")
	if !ok {
		t.Fatalf("the server started in the sandbox never answered through its preview URL (last %q)", body)
	}
	mc := f.Machine(m.ID)
	if uid != "0" {
		t.Errorf("the command runs as uid %s, want root's (the daemon switches to the sandbox user)", uid)
	}
	n, _ := strconv.Atoi(pid)
	if n <= 0 {
		t.Fatalf("pid %q", pid)
	}
	// No process of the machine carries the environment in its argv.
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
	if _, err := a.Endpoint(t.Context(), m, 8088); err != nil {
		t.Fatal(err)
	}
	if n := f.Requests("GET /sandbox/{sandboxIdOrName}/ports/{port}/preview-url"); n != 1 {
		t.Errorf("two Endpoints of one port asked Daytona %d times, want once", n)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestProviderCheck: the registered provider checks Daytona with one
// listing: ready with the key, refused with a wrong one, unreachable
// when the service is gone; the key in no error.
func TestProviderCheck(t *testing.T) {
	f := newFake(t, daytonafake.Options{})
	pc := settings(t, f)
	check := func() error {
		t.Helper()
		c, ok := openProvider(t, pc).(provider.Checker)
		if !ok {
			t.Fatal("the daytona provider is not a provider.Checker")
		}
		return c.Check(t.Context())
	}
	before := f.AllRequests()
	if err := check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if n := f.AllRequests() - before; n != 1 {
		t.Errorf("Check made %d requests, want 1", n)
	}
	t.Setenv(daytona.DefaultAPIKeyEnv, "dtn_refused_key")
	if err := check(); !errors.Is(err, errdefs.ErrProviderAuth) || strings.Contains(err.Error(), "dtn_refused_key") {
		t.Errorf("Check with a wrong key: %v, want ErrProviderAuth without the key", err)
	}
	f.Close()
	if err := check(); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("Check of a service gone: %v, want ErrProviderUnavailable", err)
	}
}
