// Package berthtest sets up what berth's workflow tests share: a real
// linux provider, a blob store, and the SDK's workflow test environment
// running berth's activities over them.
package berthtest

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/snapshot"
)

// Queue is the task queue of the test environment's activities, the
// sandbox package's default.
const Queue = "berth"

// Provider opens a linux provider on a fresh state directory, without a
// warm pool. The test binary must call linux.Main in TestMain.
func Provider(t testing.TB) *linux.Provider {
	t.Helper()
	dir, err := os.MkdirTemp("", "berth")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	p, err := linux.New(linux.Config{StateDir: dir, Pool: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DestroyAll(t, p) })
	return p
}

// Bucket opens a blob store in a temporary directory.
func Bucket(t testing.TB) *blob.Bucket {
	t.Helper()
	// As hostworker.OpenBucket opens a file store: no sidecar files.
	b, err := fileblob.OpenBucket(t.TempDir(), &fileblob.Options{Metadata: fileblob.MetadataDontWrite})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// WorkflowEnv is a workflow test environment whose activities drive a
// real linux provider, registered as "linux", with a blob store for
// outputs and snapshots.
func WorkflowEnv(t testing.TB) (*testsuite.TestWorkflowEnvironment, provider.Provider, *blob.Bucket) {
	t.Helper()
	env, acts := WorkflowEnvWith(t, map[string]provider.Provider{"linux": Provider(t)})
	return env, acts.Providers["linux"], acts.Outputs
}

// WorkflowEnvWith is WorkflowEnv over the given providers; it returns the
// activities registered.
func WorkflowEnvWith(t testing.TB, providers map[string]provider.Provider) (*testsuite.TestWorkflowEnvironment, *activities.Activities) {
	t.Helper()
	bucket := Bucket(t)
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	acts := &activities.Activities{
		Providers: providers, Outputs: bucket,
		Snapshots:    snapshot.New(Bucket(t)),
		GenericQueue: Queue, HostQueue: Queue,
	}
	env.RegisterActivity(acts)
	return env, acts
}

// KillSandbox kills a linux sandbox made by Provider from outside, as the
// OOM killer or an operator would: its daemon, PID 1 of its PID
// namespace, and with it every process in it. The sandbox is then lost.
func KillSandbox(t testing.TB, id string) {
	t.Helper()
	records, err := filepath.Glob(filepath.Join(os.TempDir(), "berth*", id, "sandbox.json"))
	if err != nil || len(records) != 1 {
		t.Fatalf("the record of sandbox %s: %v %v", id, records, err)
	}
	b, err := os.ReadFile(records[0])
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ PID int }
	if err := json.Unmarshal(b, &rec); err != nil || rec.PID <= 0 {
		t.Fatalf("sandbox %s: no daemon pid in %s (%v)", id, b, err)
	}
	if err := syscall.Kill(rec.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// DestroyAll destroys every sandbox of p, whatever the test left, and
// closes it: a failed test must not leave sandboxes running.
func DestroyAll(t testing.TB, p *linux.Provider) {
	ctx := context.Background()
	infos, err := p.List(ctx, nil)
	if err != nil {
		t.Errorf("list sandboxes to clean up: %v", err)
	}
	for _, info := range infos {
		if sb, err := p.Get(ctx, info.ID); err == nil {
			if err := sb.Destroy(ctx); err != nil {
				t.Errorf("destroy %s: %v", info.ID, err)
			}
		}
	}
	p.Close()
}
