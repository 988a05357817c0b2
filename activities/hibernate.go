package activities

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
)

// HibernateInput asks a sandbox's provider to keep its whole filesystem
// (provider.Hibernator).
type HibernateInput struct {
	Sandbox refs.Sandbox `json:"sandbox"`
	// ID names the hibernation: a retry returns what the first attempt
	// kept, and keeps nothing more.
	ID string `json:"id"`
}

// Hibernate keeps a sandbox's filesystem at its provider's service,
// heartbeating while the service works. The sandbox runs on: its
// workflow destroys it once the result is in its history. A provider
// that cannot fails with errdefs.ErrUnsupported.
func (a *Activities) Hibernate(ctx context.Context, in HibernateInput) (provider.Hibernation, error) {
	defer Heartbeat(ctx)()
	return returned(a.hibernate(ctx, in))
}

func (a *Activities) hibernate(ctx context.Context, in HibernateInput) (provider.Hibernation, error) {
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return provider.Hibernation{}, err
	}
	h, ok := sb.(provider.Hibernator)
	if !ok {
		return provider.Hibernation{}, fmt.Errorf("%w: provider %s cannot hibernate sandboxes itself", errdefs.ErrUnsupported, in.Sandbox.Provider)
	}
	ctx, end := a.traceProvider(ctx, "hibernate", in.Sandbox.Provider, in.Sandbox.ID)
	hib, err := h.Hibernate(ctx, in.ID)
	end(err)
	return hib, err
}

// WakeInput asks for a sandbox made from what a hibernation kept.
type WakeInput struct {
	Provider string               `json:"provider"`
	Spec     provider.Spec        `json:"spec"`
	From     provider.Hibernation `json:"from"`
}

// Wake makes a sandbox from a hibernation (provider.Waker), or finds the
// one a previous attempt made: the spec's id makes it idempotent, as
// Create's. What the hibernation kept having expired is an error
// wrapping errdefs.ErrNotFound, and not retried: the workflow then
// creates the sandbox from its checkpoint.
func (a *Activities) Wake(ctx context.Context, in WakeInput) (refs.Sandbox, error) {
	defer Heartbeat(ctx)()
	return returned(a.wake(ctx, in))
}

func (a *Activities) wake(ctx context.Context, in WakeInput) (refs.Sandbox, error) {
	if err := provider.ValidateSpec(in.Spec); err != nil {
		return refs.Sandbox{}, err
	}
	p, err := a.provider(in.Provider)
	if err != nil {
		return refs.Sandbox{}, err
	}
	w, ok := p.(provider.Waker)
	if !ok {
		return refs.Sandbox{}, fmt.Errorf("%w: provider %s cannot wake sandboxes", errdefs.ErrUnsupported, in.Provider)
	}
	if err := a.recordOwner(ctx, in.Spec.ID, in.Spec.Labels); err != nil {
		return refs.Sandbox{}, err
	}
	done, err := a.admit(p, in.Spec, nil)
	if err != nil {
		return refs.Sandbox{}, err
	}
	start := time.Now()
	pctx, end := a.traceProvider(ctx, "wake", in.Provider, in.Spec.ID)
	sb, err := w.Wake(pctx, in.Spec, in.From)
	end(err)
	done(err == nil)
	if err != nil {
		return refs.Sandbox{}, err
	}
	a.metrics().Created(in.Provider, sb.ID(), time.Since(start))
	return a.refOf(ctx, CreateInput{Provider: in.Provider, Spec: in.Spec}, p, sb), nil
}

// DiscardInput names a hibernation no longer needed.
type DiscardInput struct {
	Provider string               `json:"provider"`
	From     provider.Hibernation `json:"from"`
}

// DiscardHibernation drops what a hibernation kept; what is gone
// already is no error.
func (a *Activities) DiscardHibernation(ctx context.Context, in DiscardInput) error {
	return toTemporal(a.discardHibernation(ctx, in))
}

func (a *Activities) discardHibernation(ctx context.Context, in DiscardInput) error {
	p, err := a.provider(in.Provider)
	if err != nil {
		return err
	}
	w, ok := p.(provider.Waker)
	if !ok {
		return nil // it kept nothing
	}
	ctx, end := a.traceProvider(ctx, "discard_hibernation", in.Provider, "")
	err = w.Discard(ctx, in.From)
	end(err)
	return err
}
