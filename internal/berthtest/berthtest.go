// Package berthtest sets up what berth's workflow tests share: a real
// linux provider, a blob store, and the SDK's workflow test environment
// running berth's activities over them.
package berthtest

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
)

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
	b, err := fileblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// WorkflowEnv is a workflow test environment whose activities drive a
// real linux provider, registered as "linux".
func WorkflowEnv(t testing.TB) (*testsuite.TestWorkflowEnvironment, provider.Provider, *blob.Bucket) {
	t.Helper()
	p, bucket := Provider(t), Bucket(t)
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{
		Providers: map[string]provider.Provider{"linux": p}, Outputs: bucket,
		GenericQueue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
	})
	return env, p, bucket
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
