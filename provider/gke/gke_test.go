package gke_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/gke"
	"github.com/berth-dev/berth/provider/gke/gkefake"
	"github.com/berth-dev/berth/provider/remote"
)

// newAPI is the API over f, with the kubeconfig f wrote.
func newAPI(t *testing.T, f *gkefake.Server, token string) *gke.API {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := f.Kubeconfig(kc, "fake"); err != nil {
		t.Fatal(err)
	}
	if token != testToken {
		b, _ := readFile(kc)
		writeFile(t, kc, bytes.ReplaceAll(b, []byte(testToken), []byte(token)))
	}
	api, err := gke.New(gke.Config{Kubeconfig: kc, Template: testTemplate, RouterURL: f.RouterURL()})
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// TestCreateAfterLostAnswer: a claim made whose answer was lost is the
// one a retry finds; there are never two.
func TestCreateAfterLostAnswer(t *testing.T) {
	f := newFake(t, gkefake.Options{})
	api := newAPI(t, f, testToken)
	f.Inject(gkefake.Fault{Op: "create sandboxclaims", Drop: true})
	req := remote.CreateRequest{Name: "berth-lost-1", Labels: map[string]string{"berth.sandbox": "lost-1"}}
	if _, err := api.Create(t.Context(), req); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Fatalf("create with its answer lost: %v, want unavailable", err)
	}
	m, err := api.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != req.Name || m.ID == "" || m.State != remote.MachineRunning {
		t.Errorf("machine %+v", m)
	}
	if n := f.Requests("create sandboxclaims"); n != 2 {
		t.Errorf("%d creates, want 2", n)
	}
	ms, err := api.List(t.Context(), map[string]string{"berth.sandbox": "lost-1"})
	if err != nil || len(ms) != 1 || ms[0].ID != m.ID {
		t.Fatalf("list: %+v, %v; want the one machine", ms, err)
	}
	if err := api.Delete(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(t.Context(), m); err != nil {
		t.Errorf("delete of one gone: %v", err)
	}
	if _, err := api.Find(t.Context(), req.Name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("find after delete: %v", err)
	}
}

// TestFindList: machines are found by name and listed by labels, labels
// Kubernetes could not hold included; sizes are refused.
func TestFindList(t *testing.T) {
	f := newFake(t, gkefake.Options{})
	api := newAPI(t, f, testToken)
	labels := map[string]string{"berth.sandbox": "fl-1", "team": "a", "note": "not a label value!"}
	m, err := api.Create(t.Context(), remote.CreateRequest{Name: "berth-fl-1", Labels: labels, Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Delete(context.Background(), m)
	if m.ExpiresAt.Before(time.Now().Add(59*time.Minute)) || m.ExpiresAt.After(time.Now().Add(61*time.Minute)) {
		t.Errorf("expires at %v, want in an hour", m.ExpiresAt)
	}
	got, err := api.Find(t.Context(), "berth-fl-1")
	if err != nil || got.ID != m.ID || got.Labels["note"] != labels["note"] {
		t.Fatalf("find: %+v, %v", got, err)
	}
	for _, c := range []struct {
		sel  map[string]string
		want int
	}{{map[string]string{"team": "a"}, 1}, {map[string]string{"note": "not a label value!"}, 1}, {map[string]string{"team": "b"}, 0}} {
		ms, err := api.List(t.Context(), c.sel)
		if err != nil || len(ms) != c.want {
			t.Errorf("list %v: %+v, %v; want %d", c.sel, ms, err, c.want)
		}
	}
	if err := api.KeepAlive(t.Context(), m, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if got, _ := api.Find(t.Context(), "berth-fl-1"); got.ExpiresAt.Before(time.Now().Add(119 * time.Minute)) {
		t.Errorf("kept alive until %v, want two hours on", got.ExpiresAt)
	}
	if _, err := api.Create(t.Context(), remote.CreateRequest{Name: "berth-fl-2", CPU: 2}); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("a sized create: %v, want unsupported", err)
	}
	if _, err := api.Find(t.Context(), "berth-none"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("find of none: %v", err)
	}
}

// TestLeakedSandboxReaped: a claim that expires and leaves its Sandbox
// behind, as users report, leaves it listed, so that the reaper deletes
// it and its pod.
func TestLeakedSandboxReaped(t *testing.T) {
	f := newFake(t, gkefake.Options{LeakOnExpiry: true})
	api := newAPI(t, f, testToken)
	labels := map[string]string{"berth.sandbox": "leak-1"}
	m, err := api.Create(t.Context(), remote.CreateRequest{Name: "berth-leak-1", Labels: labels, Lifetime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, ok := f.Machine("default", "berth-leak-1"); !ok {
			t.Fatal("the machine went with the claim")
		}
		ms, err := api.List(t.Context(), labels)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 && ms[0].ID == m.ID && !claimExists(t, api, "berth-leak-1") {
			if err := api.Delete(t.Context(), ms[0]); err != nil {
				t.Fatal(err)
			}
			waitGone(t, f, "berth-leak-1")
			if ms, _ := api.List(t.Context(), labels); len(ms) != 0 {
				t.Errorf("listed after the reaping: %+v", ms)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the leaked sandbox was never listed alone")
}

func claimExists(t *testing.T, api *gke.API, name string) bool {
	t.Helper()
	m, err := api.Find(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	// An orphan's expiry is none: its claim held it.
	return !m.ExpiresAt.IsZero()
}

func waitGone(t *testing.T, f *gkefake.Server, name string) {
	t.Helper()
	for range 100 {
		if _, ok := f.Machine("default", name); !ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the machine of %s is still there", name)
}

// TestDaemon: the daemon uploaded, or baked into the template's image
// and only started; a baked path that holds nothing fails the create.
func TestDaemon(t *testing.T) {
	for _, baked := range []bool{false, true} {
		t.Run(map[bool]string{false: "uploaded", true: "baked"}[baked], func(t *testing.T) {
			const bakedPath = "/opt/baked/berth-sandboxd"
			opts := gkefake.Options{}
			if baked {
				opts.ImageFiles = map[string]string{bakedPath: daemon}
			}
			f := newFake(t, opts)
			pc := settings(t, f)
			if baked {
				pc["daemon-baked"] = bakedPath
			}
			p := openProvider(t, pc)
			sb, err := p.Create(t.Context(), provider.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(context.Background())
			var out bytes.Buffer
			res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"sh", "-c", "echo hi"}, Stdout: &out})
			if err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != "hi" {
				t.Fatalf("exec: %+v %q, %v", res, out.String(), err)
			}
			// The environment's file is one upload; the daemon another.
			want := 2
			if baked {
				want = 1
			}
			if n := f.Requests("upload"); n != want {
				t.Errorf("%d uploads, want %d", n, want)
			}
		})
	}
	t.Run("baked-missing", func(t *testing.T) {
		f := newFake(t, gkefake.Options{})
		pc := settings(t, f)
		pc["daemon-baked"] = "/opt/none/berth-sandboxd"
		p := openProvider(t, pc)
		if sb, err := p.Create(t.Context(), provider.Spec{}); err == nil || !strings.Contains(err.Error(), "no executable") {
			if sb != nil {
				sb.Destroy(context.Background())
			}
			t.Fatalf("create with no baked daemon: %v", err)
		}
	})
}

// TestErrors: the cluster's refusals reach berth as its kinds, one
// line, the token in none of them nor in the logs.
func TestErrors(t *testing.T) {
	var logs bytes.Buffer
	f := newFake(t, gkefake.Options{MaxClaims: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	api := newAPI(t, f, testToken)
	if err := api.Check(t.Context()); err != nil {
		t.Fatalf("check: %v\n%s", err, logs.String())
	}
	// client-go waits out a Retry-After and tries again, ten times: the
	// eleventh 429 is berth's.
	f.Inject(gkefake.Fault{Op: "create sandboxclaims", Status: 429, RetryAfter: "1", Message: "slow down", Times: 11})
	_, err := api.Create(t.Context(), remote.CreateRequest{Name: "berth-e-1"})
	var e *gke.Error
	if !errors.Is(err, errdefs.ErrProviderUnavailable) || !errors.As(err, &e) || e.RetryAfter != time.Second {
		t.Errorf("429: %v, want unavailable, retry after 1s", err)
	}
	m, err := api.Create(t.Context(), remote.CreateRequest{Name: "berth-e-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Delete(context.Background(), m)
	if _, err := api.Create(t.Context(), remote.CreateRequest{Name: "berth-e-2"}); !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("over the quota: %v, want quota", err)
	}
	f.Inject(gkefake.Fault{Op: "get sandboxtemplates", Status: 503})
	if err := api.Check(t.Context()); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("check at 503: %v", err)
	}
	bad := newAPI(t, f, "wrong-token-"+testToken)
	for name, err := range map[string]error{
		"check":  bad.Check(t.Context()),
		"create": func() error { _, err := bad.Create(t.Context(), remote.CreateRequest{Name: "berth-e-3"}); return err }(),
		"list":   func() error { _, err := bad.List(t.Context(), nil); return err }(),
	} {
		if !errors.Is(err, errdefs.ErrProviderAuth) {
			t.Errorf("%s with a wrong token: %v, want auth", name, err)
		}
		if s := err.Error(); strings.Contains(s, testToken) || strings.Contains(s, "\n") {
			t.Errorf("%s: %q holds the token or a newline", name, s)
		}
	}
	if strings.Contains(logs.String(), testToken) {
		t.Error("the token is in the fake's logs")
	}
}

// TestServiceEndpoint: with endpoint "service", the daemon's port is the
// Sandbox's Service address, for a berth inside the cluster, with no
// transport of the provider's.
func TestServiceEndpoint(t *testing.T) {
	f := newFake(t, gkefake.Options{})
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := f.Kubeconfig(kc, "fake"); err != nil {
		t.Fatal(err)
	}
	api, err := gke.New(gke.Config{Kubeconfig: kc, Template: testTemplate, RouterURL: f.RouterURL(), Endpoint: gke.EndpointService})
	if err != nil {
		t.Fatal(err)
	}
	m, err := api.Create(t.Context(), remote.CreateRequest{Name: "berth-svc-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Delete(context.Background(), m)
	ep, err := api.Endpoint(t.Context(), m, 49999)
	if err != nil {
		t.Fatal(err)
	}
	if ep.URL != "http://berth-svc-1.default.svc.cluster.local:49999" || ep.Transport != nil {
		t.Errorf("endpoint %+v", ep)
	}
}

// TestNoTokenInLogs: a whole sandbox's life, and a refused key, log
// nothing that holds the cluster's token.
func TestNoTokenInLogs(t *testing.T) {
	f := newFake(t, gkefake.Options{})
	var logs bytes.Buffer
	ctx := provider.WithLogger(t.Context(), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	pc := settings(t, f)
	p, err := provider.Open(ctx, gke.Name, pc)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, provider.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if c, ok := p.(provider.Checker); !ok || c.Check(ctx) != nil {
		t.Errorf("check: %v", ok)
	}
	if strings.Contains(logs.String(), testToken) {
		t.Error("the token is in the provider's logs")
	}
}
