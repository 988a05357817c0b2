// Package agenttest sets up what the coding agent's tests share: one
// embedded Temporal server per test binary, and for each test a real
// host (hostworker) with the linux provider and a fake model
// (internal/fakemodel) its model activity calls.
package agenttest

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
)

var shared struct {
	once sync.Once
	srv  *devserver.Server
	c    client.Client
	dir  string
	err  error
}

// Client returns a client of the test binary's embedded server, started
// on first use; TestMain calls Close once the tests have run.
func Client(t testing.TB) client.Client {
	t.Helper()
	shared.once.Do(func() {
		logger := slog.New(slog.DiscardHandler)
		shared.dir, shared.err = os.MkdirTemp("", "berth-server")
		if shared.err != nil {
			return
		}
		shared.srv, shared.err = devserver.Start(context.Background(),
			devserver.Options{DataDir: shared.dir, Address: "127.0.0.1:0", Logger: logger})
		if shared.err != nil {
			return
		}
		opts := shared.srv.ClientOptions()
		opts.Logger = hostworker.Logger(logger)
		shared.c, shared.err = client.Dial(opts)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// Close stops the shared server, if it was started.
func Close() {
	if shared.c != nil {
		shared.c.Close()
	}
	if shared.srv != nil {
		shared.srv.Stop()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}

// Harness is a test's host: the shared server's client, a linux
// provider of its own, a fake model, and the host's workers on
// sandbox.DefaultQueue, stopped when the test ends. Tests that share a
// server must not run in parallel: each one's host serves the default
// queues.
type Harness struct {
	T     testing.TB
	C     client.Client
	P     *linux.Provider
	Model *fakemodel.Server
	Opts  hostworker.Options
	W     *hostworker.Worker
}

// New starts a test's host on the shared server.
func New(t testing.TB) *Harness {
	h := &Harness{T: t, C: Client(t), P: berthtest.Provider(t), Model: fakemodel.New(t)}
	h.Opts = hostworker.Options{
		Providers: map[string]provider.Provider{"linux": h.P}, Outputs: berthtest.Bucket(t),
		Snapshots: snapshot.New(berthtest.Bucket(t)),
		Queue:     sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Model: &model.Config{BaseURL: h.Model.URL, APIKey: fakemodel.Key, Model: fakemodel.Model,
			HeartbeatEvery: 200 * time.Millisecond},
	}
	h.StartWorker()
	t.Cleanup(func() {
		if h.W != nil {
			h.W.Stop()
		}
	})
	return h
}

// StartWorker starts the host's workers.
func (h *Harness) StartWorker() {
	w, err := hostworker.StartWorker(h.C, h.Opts)
	if err != nil {
		h.T.Fatal(err)
	}
	h.W = w
}

// StopWorker stops them.
func (h *Harness) StopWorker() {
	h.W.Stop()
	h.W = nil
}

// Terminate terminates a workflow when the test ends, if it still runs.
func (h *Harness) Terminate(id string) {
	h.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.C.TerminateWorkflow(ctx, id, "", "test over")
	})
}
