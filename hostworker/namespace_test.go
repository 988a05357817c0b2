package hostworker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/internal/testserver"
	"github.com/berth-dev/berth/workflows"
)

// TestHostWaitsForNamespace: a host started before its namespace
// exists, as workers starting with a new cluster are, waits for it,
// starting its workers again with backoff and saying so once an
// attempt, and comes up once the namespace is registered: its reaper,
// a workflow on the shared queue with activities on the host's own,
// makes a pass. A host whose namespace never comes gives up at its
// context's end, with the server's answer.
func TestHostWaitsForNamespace(t *testing.T) {
	opts := testserver.Options(t)
	opts.Namespace = "late-" + strings.ToLower(t.Name()[len(t.Name())-9:])
	c, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var logs testkit.SyncBuffer
	cfg := hostworker.HostConfig{
		DataDir: shortDataDir(t), Providers: []string{"linux"}, Queue: "late", HostQueue: "late@h1",
		ReapEvery: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}

	// Never registered: the start gives up when its context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	_, err = hostworker.StartHost(ctx, c, hostworker.HostConfig{DataDir: shortDataDir(t), Providers: []string{"linux"}, Queue: "never", HostQueue: "never@h1"})
	cancel()
	var missing *serviceerror.NamespaceNotFound
	if !errors.As(err, &missing) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a start whose namespace never comes: %v; want NamespaceNotFound, then the deadline", err)
	}

	started := make(chan error, 1)
	var h *hostworker.Host
	go func() {
		var err error
		h, err = hostworker.StartHost(t.Context(), c, cfg)
		started <- err
	}()
	testkit.Eventually(t, "the host to retry its start", time.Minute, func() bool {
		return strings.Count(logs.String(), "does not know the namespace yet") >= 2
	})
	select {
	case err := <-started:
		t.Fatalf("the host started before its namespace existed: %v", err)
	default:
	}
	_, err = c.WorkflowService().RegisterNamespace(t.Context(), &workflowservice.RegisterNamespaceRequest{
		Namespace: opts.Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("the host, once its namespace is registered: %v\n%s", err, logs.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the host did not start within 2 minutes of its namespace's registration\n%s", logs.String())
	}
	defer h.Close()
	testkit.Eventually(t, "the host's reaper to make a pass", time.Minute, func() bool {
		v, err := c.QueryWorkflow(t.Context(), workflows.ReaperID(cfg.HostQueue), "", workflows.QueryReaper)
		var st workflows.ReaperStatus
		return err == nil && v.Get(&st) == nil && st.Passes >= 1
	})
	if n := strings.Count(logs.String(), "does not know the namespace yet"); n < 2 {
		t.Errorf("%d attempts logged; want one line an attempt", n)
	}
}
