package remote

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// Snapshotter is implemented by an API whose service can keep a
// machine's whole filesystem as an image of its own, which a later
// CreateRequest.Snapshot starts a machine from (Modal's filesystem
// snapshot): the provider New makes is then a provider.Waker, its
// sandboxes provider.Hibernators, and its Capabilities say Hibernate.
// Its errors are classified as API's are, and a snapshot that did not
// end within the API's own timeout is one wrapping errdefs.ErrTimeout.
type Snapshotter interface {
	// Snapshot keeps m's filesystem and says until when; the machine
	// runs on. Called again with the key of a snapshot it kept of m (a
	// retry after a lost answer) it returns that one, where the service
	// can tell.
	Snapshot(ctx context.Context, m Machine, key string) (provider.Hibernation, error)
	// DeleteSnapshot drops a snapshot; one gone already is no error.
	DeleteSnapshot(ctx context.Context, ref string) error
}

// waker makes a provider over a Snapshotter a provider.Waker.
type waker struct{ p *Provider }

// wakerProvider and checkedWaker are the providers over a Snapshotter:
// types of their own, so that a provider over an API that cannot
// snapshot is no provider.Waker.
type (
	wakerProvider struct {
		*Provider
		waker
	}
	checkedWaker struct {
		checkedProvider
		waker
	}
)

var (
	_ provider.Waker   = (*wakerProvider)(nil)
	_ provider.Waker   = (*checkedWaker)(nil)
	_ provider.Checker = (*checkedWaker)(nil)
)

// hibernator is a sandbox of a provider over a Snapshotter.
type hibernator struct{ *sandbox }

var _ provider.Hibernator = hibernator{}

// public is the handle callers get: a Hibernator when the API can
// snapshot.
func (p *Provider) public(sb *sandbox) provider.Sandbox {
	if p.snapshotter != nil {
		return hibernator{sb}
	}
	return sb
}

// wakeMargin: a snapshot that expires sooner than this is not woken
// from, so that it cannot expire while its machine is being made.
const wakeMargin = time.Minute

// Hibernate implements provider.Hibernator: the API keeps the machine's
// filesystem. The machine runs on: the caller destroys it once the
// Hibernation is recorded.
func (h hibernator) Hibernate(ctx context.Context, id string) (provider.Hibernation, error) {
	if err := provider.ValidateID(id); err != nil {
		return provider.Hibernation{}, err
	}
	if err := h.ready(); err != nil {
		return provider.Hibernation{}, err
	}
	m := h.mc.snapshot()
	if m.State != MachineRunning {
		return provider.Hibernation{}, fmt.Errorf("%w: %s: its machine is %s", errdefs.ErrSandboxLost, h.id, m.State)
	}
	hib, err := h.p.snapshotter.Snapshot(ctx, m, id)
	if err != nil {
		return provider.Hibernation{}, fmt.Errorf("hibernate %s: %w", h.id, err)
	}
	if hib.Ref == "" || hib.ExpiresAt.IsZero() {
		return provider.Hibernation{}, fmt.Errorf("%w: %s: a snapshot with no id or no expiry", errdefs.ErrProviderUnavailable, h.p.Name())
	}
	return hib, nil
}

// Wake implements provider.Waker: spec's machine is made from the
// snapshot, and its daemon started, as Create does. A retry finds the
// machine an earlier Wake made, by its name.
func (w waker) Wake(ctx context.Context, spec provider.Spec, h provider.Hibernation) (provider.Sandbox, error) {
	if h.Ref == "" {
		return nil, fmt.Errorf("%w: %s: wake from no snapshot", errdefs.ErrBadInput, w.p.Name())
	}
	if spec.ID != "" {
		// A machine made by an earlier Wake is woken, whatever the
		// clock says now of the snapshot.
		if _, err := w.p.api.Find(ctx, NamePrefix+spec.ID); err == nil {
			sb, err := w.p.create(ctx, spec, h.Ref)
			if err != nil {
				return nil, err
			}
			return w.p.public(sb), nil
		}
	}
	if left := time.Until(h.ExpiresAt); left < wakeMargin {
		return nil, fmt.Errorf("%w: %s: snapshot %s expired at %s", errdefs.ErrNotFound, w.p.Name(), h.Ref, h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	sb, err := w.p.create(ctx, spec, h.Ref)
	if err != nil {
		return nil, err
	}
	return w.p.public(sb), nil
}

// Discard implements provider.Waker.
func (w waker) Discard(ctx context.Context, h provider.Hibernation) error {
	if h.Ref == "" {
		return nil
	}
	if err := w.p.snapshotter.DeleteSnapshot(ctx, h.Ref); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}
