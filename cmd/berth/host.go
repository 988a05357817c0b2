package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"go.temporal.io/sdk/client"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// URLs

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
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
	linux  *linux.Provider
	bucket *blob.Bucket
	worker *hostworker.Worker
}

// startHost opens the providers named and starts the workers.
func startHost(ctx context.Context, c client.Client, log *slog.Logger, dataDir, blob, queue, hostQueue string, providers []string) (*host, error) {
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
	for _, name := range providers {
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
	if h.bucket, err = openBucket(ctx, blob); err != nil {
		h.close()
		return nil, err
	}
	h.worker, err = hostworker.Start(c, hostworker.Options{
		Providers: ps, Outputs: h.bucket, Queue: queue, HostQueue: hostQueue,
		Workflows: []any{workflows.Run},
	})
	if err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

func (h *host) close() {
	if h.worker != nil {
		h.worker.Stop()
	}
	if h.bucket != nil {
		h.bucket.Close()
	}
	if h.linux != nil {
		h.linux.Close()
	}
}
