package hostworker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// unopenable is a provider this test binary links that never opens, as
// one whose engine is missing on a host.
const unopenable = "test-unopenable"

// reporting is a provider that serves and reports something amiss, as
// docker does while its default image is not made.
const reporting = "test-reporting"

type reportingProvider struct{ provider.Provider }

func (reportingProvider) Name() string                        { return reporting }
func (reportingProvider) Capabilities() provider.Capabilities { return provider.Capabilities{} }
func (reportingProvider) Report() string                      { return "default image x: not made: too big" }

// List holds nothing: the host lists what each provider holds at start.
func (reportingProvider) List(context.Context, map[string]string) ([]provider.Info, error) {
	return nil, nil
}

func init() {
	provider.Register(unopenable, func(context.Context, provider.Config) (provider.Provider, error) {
		return nil, errors.New("its engine is not installed here")
	})
	provider.Register(reporting, func(context.Context, provider.Config) (provider.Provider, error) {
		return reportingProvider{}, nil
	})
}

// A host serves every provider that opens and says why not of the
// others; one named explicitly must open.
func TestHostProviders(t *testing.T) {
	c := server(t)
	ctx := t.Context()
	data := shortDataDir(t)
	if _, err := hostworker.StartHost(ctx, c, hostworker.HostConfig{
		DataDir: data, Providers: []string{unopenable}, Queue: "named",
	}); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Fatalf("a named provider that cannot open: %v, want its reason", err)
	}

	h, err := hostworker.StartHost(ctx, c, hostworker.HostConfig{
		DataDir: data, Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		// An image of its own: docker makes no default image.
		ProviderConfig: map[string]provider.Config{"docker": {"image": "berth-test:1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var got []sandbox.HostProviders
	// The server lists the host among the queue's pollers once its
	// worker's first poll has reached it, a moment after StartHost.
	testkit.Eventually(t, "the host listed", 30*time.Second, func() bool {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue},
			workflows.Providers, workflows.ProvidersInput{})
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, &got); err != nil {
			t.Fatal(err)
		}
		return len(got) > 0
	})
	if len(got) != 1 || got[0].Host != sandbox.DefaultQueue || got[0].Unreachable {
		t.Fatalf("hosts: %+v, want the one, on %s", got, sandbox.DefaultQueue)
	}
	byName := map[string]provider.Availability{}
	for _, s := range got[0].Providers {
		byName[s.Name] = s
	}
	if s := byName["linux"]; !s.Available || s.Capabilities == nil || !s.Capabilities.Pause || s.Host != sandbox.DefaultQueue {
		t.Errorf("linux: %+v, want available with its capabilities", s)
	}
	if s := byName[unopenable]; s.Available || !strings.Contains(s.Reason, "not installed") {
		t.Errorf("%s: %+v, want unavailable with its reason", unopenable, s)
	}
	if s := byName[reporting]; !s.Available || s.Note != "default image x: not made: too big" {
		t.Errorf("%s: %+v, want available with what it reports", reporting, s)
	}
	if s := byName["linux"]; s.Note != "" {
		t.Errorf("linux: %+v, want nothing amiss", s)
	}
	if _, err := os.Stat(filepath.Join(data, "linux")); err != nil {
		t.Errorf("the linux provider's state is not in the data directory: %v", err)
	}
}

// shortDataDir is a data directory with a short path: sandboxes' sockets
// live below it.
func shortDataDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "bh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		destroyLeft(t, filepath.Join(d, "linux"))
		os.RemoveAll(d)
	})
	return d
}

// destroyLeft destroys the sandboxes a linux provider's state directory
// still holds: sandboxes outlive their host (tests leave some as a crash
// would), and their daemons would run on once the directory is gone.
func destroyLeft(t *testing.T, stateDir string) {
	if _, err := os.Stat(stateDir); err != nil {
		return
	}
	p, err := linux.New(linux.Config{StateDir: stateDir, Pool: -1})
	if err != nil {
		t.Errorf("open %s to destroy what is left: %v", stateDir, err)
		return
	}
	defer p.Close()
	ctx := context.Background()
	infos, err := p.List(ctx, nil)
	if err != nil {
		t.Errorf("list what is left in %s: %v", stateDir, err)
	}
	for _, info := range infos {
		if sb, err := p.Get(ctx, info.ID); err == nil {
			if err := sb.Destroy(ctx); err != nil {
				t.Errorf("destroy %s: %v", info.ID, err)
			}
		}
	}
}

// TestOpenBucketFileStore checks that a file store is opened without
// fileblob's sidecar files unless its URL asks for them, that its
// objects read back whole either way, and that a bad URL is refused.
func TestOpenBucketFileStore(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		sidecar     bool
	}{
		{"default", "", false},
		{"other-parameter", "?create_dir=true", false},
		{"sidecars-asked", "?metadata=", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "blobs")
			b, err := hostworker.OpenBucket(t.Context(), "file://"+dir+tc.query)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.WriteAll(t.Context(), "outputs/x/part-0", []byte("hello"), nil); err != nil {
				t.Fatal(err)
			}
			got, err := b.ReadAll(t.Context(), "outputs/x/part-0")
			if err != nil || string(got) != "hello" {
				t.Fatalf("read back %q, %v; want hello", got, err)
			}
			entries, err := os.ReadDir(filepath.Join(dir, "outputs", "x"))
			if err != nil {
				t.Fatal(err)
			}
			var sidecars int
			for _, e := range entries {
				if strings.HasSuffix(e.Name(), ".attrs") {
					sidecars++
				}
			}
			if want := map[bool]int{false: 0, true: 1}[tc.sidecar]; sidecars != want {
				t.Errorf("%d sidecar files beside the object, want %d", sidecars, want)
			}
		})
	}
	if _, err := hostworker.OpenBucket(t.Context(), "file://"+t.TempDir()+"?metadata=skip&no_such_parameter=1"); err == nil {
		t.Error("a file store URL with an unknown parameter opened")
	}
}
