package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob:// URLs
	_ "gocloud.dev/blob/fileblob"  // file:// URLs
	_ "gocloud.dev/blob/gcsblob"   // gs:// URLs
	_ "gocloud.dev/blob/s3blob"    // s3:// URLs

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/workflows"
)

// defaultDataDir is where berth keeps its state: the Temporal database,
// sandboxes' state and the blob store.
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/berth"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "berth")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "berth")
}

// blobURL is the blob store of a data directory.
func blobURL(dataDir string) string { return "file://" + filepath.Join(dataDir, "blobs") }

// openBucket opens a blob store by URL (file://, s3://, gs://, azblob://
// where the worker links those drivers), creating a file store's
// directory.
func openBucket(ctx context.Context, url string) (*blob.Bucket, error) {
	if dir, ok := strings.CutPrefix(url, "file://"); ok {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	b, err := blob.OpenBucket(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", url, err)
	}
	return b, nil
}

// host is what a worker host runs: its providers, its blob store, and
// its Temporal workers.
type host struct {
	linux     *linux.Provider
	bucket    *blob.Bucket // outputs
	snapshots *blob.Bucket
	worker    *hostworker.Worker
}

// hostConfig is what a worker host serves, and how.
type hostConfig struct {
	dataDir string
	blob    string // blob store URL; outputs and snapshots/ go there
	queue   string
	// hostQueue is this host's own queue; empty means queue@hostname.
	hostQueue string
	providers []string
	// reapEvery is how often the host's reaper runs; zero means never.
	reapEvery time.Duration
	// outputRetention is how long sandboxes' outputs outlive their owner.
	outputRetention time.Duration
}

// startHost opens the providers named, starts the workers, and
// schedules the host's reaper.
func startHost(ctx context.Context, c client.Client, log *slog.Logger, cfg hostConfig) (*host, error) {
	dataDir := cfg.dataDir
	// Sandboxes reach their workspaces below the data directory with ids
	// of their own: it must be searchable (not readable) by others.
	if err := os.MkdirAll(dataDir, 0o711); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(dataDir); err == nil && fi.Mode().Perm()&0o001 == 0 {
		if err := os.Chmod(dataDir, fi.Mode().Perm()|0o011); err != nil {
			return nil, err
		}
	}
	h := &host{}
	ps := map[string]provider.Provider{}
	for _, name := range cfg.providers {
		switch name {
		case linux.Name:
			p, err := linux.New(linux.Config{StateDir: filepath.Join(dataDir, "linux"), Logger: log})
			if err != nil {
				return nil, err
			}
			h.linux = p
			ps[name] = p
		default:
			return nil, fmt.Errorf("unknown provider %q (known: %s)", name, linux.Name)
		}
	}
	var err error
	if h.bucket, err = openBucket(ctx, cfg.blob); err != nil {
		h.close()
		return nil, err
	}
	// A bucket of its own: PrefixedBucket takes over the one it wraps.
	snapBucket, err := openBucket(ctx, cfg.blob)
	if err != nil {
		h.close()
		return nil, err
	}
	h.snapshots = blob.PrefixedBucket(snapBucket, snapshotPrefix)
	snapshots := snapshot.New(h.snapshots)
	h.worker, err = hostworker.Start(c, hostworker.Options{
		Providers: ps, Outputs: h.bucket, Snapshots: snapshots,
		Queue: cfg.queue, HostQueue: cfg.hostQueue,
		Workflows: []any{workflows.Run, workflows.Sandbox, workflows.Reaper, workflows.Snapshots},
	})
	if err != nil {
		h.close()
		return nil, err
	}
	if cfg.reapEvery > 0 {
		in := workflows.ReaperInput{Queue: h.worker.HostQueue, OutputRetention: cfg.outputRetention}
		if err := scheduleReaper(ctx, c, cfg.queue, in, cfg.reapEvery); err != nil {
			h.close()
			return nil, err
		}
	}
	return h, nil
}

// snapshotPrefix is where snapshots live in the blob store.
const snapshotPrefix = "snapshots/"

// scheduleReaper creates, or updates, the schedule that runs this host's
// reaper every so often. Several workers of one host share it.
func scheduleReaper(ctx context.Context, c client.Client, queue string, in workflows.ReaperInput, every time.Duration) error {
	id := "berth-reaper-" + in.Queue
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: every}}}
	action := &client.ScheduleWorkflowAction{
		ID: "berth-reap-" + in.Queue, Workflow: workflows.Reaper, TaskQueue: queue,
		Args: []any{in},
	}
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID: id, Spec: spec, Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, Action: action,
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		err = c.ScheduleClient().GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
			DoUpdate: func(u client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
				u.Description.Schedule.Spec = &spec
				u.Description.Schedule.Action = action
				return &client.ScheduleUpdate{Schedule: &u.Description.Schedule}, nil
			},
		})
	}
	if err != nil {
		return fmt.Errorf("schedule the reaper: %w", err)
	}
	return nil
}

func (h *host) close() {
	if h.worker != nil {
		h.worker.Stop()
	}
	if h.bucket != nil {
		h.bucket.Close()
	}
	if h.snapshots != nil {
		h.snapshots.Close()
	}
	if h.linux != nil {
		h.linux.Close()
	}
}

// defaultReapEvery is how often a host's reaper runs by default.
const defaultReapEvery = 5 * time.Minute
