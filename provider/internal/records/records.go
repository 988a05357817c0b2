// Package records keeps a provider's records of its sandboxes on the
// host, one JSON file each, and finds sandboxes by id and by label. A
// record exists from the moment its sandbox does until the sandbox is
// destroyed: it is what every process on the host that opens the
// provider sees of the sandbox.
package records

import (
	"encoding/json"
	"fmt"
	"github.com/berth-dev/berth/internal/randid"

	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// Base is what every provider records of a sandbox; a provider's record
// embeds it beside what is its own.
type Base struct {
	ID        string             `json:"id"`
	Labels    map[string]string  `json:"labels,omitempty"`
	Resources provider.Resources `json:"resources"`
	CreatedAt time.Time          `json:"created_at"`
	ExpiresAt time.Time          `json:"expires_at"`
	Lease     time.Duration      `json:"lease,omitempty"`
}

// Info is the sandbox's provider.Info, less its state.
func (b *Base) Info(providerName string) provider.Info {
	return provider.Info{ID: b.ID, Provider: providerName, Labels: b.Labels, CreatedAt: b.CreatedAt,
		ExpiresAt: b.ExpiresAt, Resources: b.Resources, Lease: b.Lease}
}

// maxRecord bounds what is read of a record: 64 labels of at most 384
// bytes and the rest fit many times over.
const maxRecord = 1 << 20

// Write publishes v as the record at path, whole: a reader sees all of
// it or nothing.
func Write(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp-" + randid.Hex(4)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// Read reads the record of sandbox id at path into v. It reports
// errdefs.ErrNotFound when there is none.
func Read(path, id string, v any) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", errdefs.ErrNotFound, id)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err == nil && len(b) > maxRecord {
		err = errors.New("record too large")
	}
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return fmt.Errorf("record of sandbox %s: %w", id, err)
	}
	return nil
}

// Exists reports errdefs.ErrNotFound once the record at path of sandbox
// id is gone: the sandbox has been destroyed, through any handle.
func Exists(path, id string) error {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", errdefs.ErrNotFound, id)
	}
	return err
}

// IDs lists the sandboxes whose records are in dir: the entries named
// id+suffix, or with no suffix the directories named id, whose id is a
// valid sandbox id.
func IDs(dir, suffix string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), suffix)
		if suffix == "" {
			ok = e.IsDir()
		}
		if ok && provider.ValidateID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// A Handle is a provider's handle on one sandbox, as List needs it.
type Handle interface {
	Info(ctx context.Context) (provider.Info, error)
	// Labels are the sandbox's, as recorded.
	Labels() map[string]string
}

// List gives the Info of each sandbox of ids whose labels hold every
// label of want; get opens a sandbox. A sandbox destroyed meanwhile, or
// being created, is left out.
func List[H Handle](ctx context.Context, ids []string, get func(id string) (H, error), want map[string]string) ([]provider.Info, error) {
	var infos []provider.Info
	for _, id := range ids {
		h, err := get(id)
		if err != nil || !Matches(h.Labels(), want) {
			continue
		}
		info, err := h.Info(ctx)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// Matches reports whether have holds every label of want.
func Matches(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// Stale lists the entries of dir last changed at least age ago: what a
// process that died may have left. Younger ones may be another process's
// work in progress.
func Stale(dir string, age time.Duration) []fs.DirEntry {
	entries, _ := os.ReadDir(dir)
	var stale []fs.DirEntry
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) >= age {
			stale = append(stale, e)
		}
	}
	return stale
}

// NewID makes a sandbox id for a spec that names none.
func NewID() string { return "sb-" + randid.Hex(8) }

// NewBase is the record of a sandbox made now of spec, with limits res.
func NewBase(spec provider.Spec, res provider.Resources) Base {
	now := time.Now()
	lifetime := spec.Lifetime
	if lifetime == 0 {
		lifetime = provider.DefaultLifetime
	}
	return Base{ID: spec.ID, Labels: spec.Labels, Resources: res, CreatedAt: now.UTC(), ExpiresAt: now.Add(lifetime).UTC(),
		Lease: spec.Lease}
}
