package berth

import (
	"context"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// HostProviders says which providers one host serves, and why not the
// others its binary links.
type HostProviders struct {
	// Host is the host's own task queue.
	Host      string                  `json:"host"`
	Providers []provider.Availability `json:"providers,omitempty"`
	// Unreachable says the host did not answer within 5 s, and Error
	// why.
	Unreachable bool   `json:"unreachable,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Providers says, of every host whose workers poll the default queue,
// which providers it serves, with their capabilities.
func (c *Client) Providers(ctx context.Context) ([]HostProviders, error) {
	hosts, err := c.catalog().providers(ctx)
	out := make([]HostProviders, len(hosts))
	for i, h := range hosts {
		out[i] = HostProviders{Host: h.Host, Providers: h.Providers, Unreachable: h.Unreachable, Error: h.Error}
	}
	return out, err
}

// Snapshots lists and removes the snapshots of the workers' store.
type Snapshots struct {
	c *Client
}

// Snapshots returns the store's snapshots.
func (c *Client) Snapshots() *Snapshots { return &Snapshots{c: c} }

// SnapshotInfo is a snapshot in the store.
type SnapshotInfo struct {
	ID string
	// User says a user took it (Sandbox.Snapshot); otherwise it is one of
	// berth's own checkpoints.
	User    bool
	Kind    string // "user" or "checkpoint"
	Created time.Time
	// Sandbox is the sandbox it was taken of, by the id its user knows.
	Sandbox string
	Labels  map[string]string
	// Files and Size (bytes) are its workspace's; Stored what it added
	// to the store.
	Files        int
	Size, Stored int64
}

// List lists the snapshots, berth's checkpoints among them.
func (s *Snapshots) List(ctx context.Context) ([]SnapshotInfo, error) {
	out, err := s.c.catalog().snapshots(ctx, workflows.SnapshotsInput{})
	if err != nil {
		return nil, err
	}
	infos := make([]SnapshotInfo, 0, len(out.Snapshots))
	for _, sn := range out.Snapshots {
		owner := sn.Labels[sandbox.LabelWorkflowID]
		if owner == "" {
			owner = sn.Labels[sandbox.LabelSandbox]
		}
		infos = append(infos, SnapshotInfo{ID: sn.ID, User: sn.Kind == sandbox.SnapshotUser, Kind: sn.Kind,
			Created: sn.Created, Sandbox: owner, Labels: sn.Labels, Files: sn.Files, Size: sn.Size, Stored: sn.Stored})
	}
	return infos, nil
}

// RemoveFailure says why a snapshot could not be removed.
type RemoveFailure struct {
	ID      string
	Kind    Kind
	Message string
}

// Remove deletes the snapshots ids names (their data goes at the next
// reaping): it returns those deleted, and those that could not be, and
// why.
func (s *Snapshots) Remove(ctx context.Context, ids ...string) (deleted []string, failed []RemoveFailure, err error) {
	out, err := s.c.catalog().snapshots(ctx, workflows.SnapshotsInput{Delete: ids})
	if err != nil {
		return nil, nil, err
	}
	for _, f := range out.Failed {
		failed = append(failed, RemoveFailure{ID: f.ID, Kind: f.Kind, Message: f.Message})
	}
	return out.Deleted, failed, nil
}
