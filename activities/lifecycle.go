package activities

import (
	"context"
	"fmt"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
)

// Pause freezes a sandbox. A provider that cannot pause natively fails
// with errdefs.ErrUnsupported, and the workflow hibernates it instead.
func (a *Activities) Pause(ctx context.Context, ref refs.Sandbox) error {
	return toTemporal(a.pause(ctx, ref))
}

func (a *Activities) pause(ctx context.Context, ref refs.Sandbox) error {
	// A sandbox its host parked stays paused, now by its workflow's
	// wish: no resume first.
	sb, err := a.get(ctx, ref)
	if err != nil {
		return err
	}
	p, ok := sb.(provider.Pauser)
	if !ok {
		return fmt.Errorf("%w: provider %s cannot pause sandboxes", errdefs.ErrUnsupported, ref.Provider)
	}
	return a.Parked.Claim(ParkedRef{Provider: ref.Provider, ID: ref.ID}, func() error {
		pctx, end := a.traceProvider(ctx, "pause", ref.Provider, ref.ID)
		err := p.Pause(pctx)
		end(err)
		return err
	})
}

// Resume thaws a paused sandbox.
func (a *Activities) Resume(ctx context.Context, ref refs.Sandbox) error {
	return toTemporal(a.resume(ctx, ref))
}

func (a *Activities) resume(ctx context.Context, ref refs.Sandbox) error {
	p, err := a.pauser(ctx, ref)
	if err != nil {
		return err
	}
	ctx, end := a.traceProvider(ctx, "resume", ref.Provider, ref.ID)
	err = p.Resume(ctx)
	end(err)
	return err
}

func (a *Activities) pauser(ctx context.Context, ref refs.Sandbox) (provider.Pauser, error) {
	sb, err := a.sandbox(ctx, ref)
	if err != nil {
		return nil, err
	}
	p, ok := sb.(provider.Pauser)
	if !ok {
		return nil, fmt.Errorf("%w: provider %s cannot pause sandboxes", errdefs.ErrUnsupported, ref.Provider)
	}
	return p, nil
}

// ListInput asks for the sandboxes this worker's providers hold.
type ListInput struct {
	// Labels the sandboxes must all carry; empty lists every one.
	Labels map[string]string `json:"labels,omitempty"`
}

// List describes the sandboxes of every provider this worker serves. For
// host-bound providers that is the sandboxes of this host only: run it on
// the host's queue.
func (a *Activities) List(ctx context.Context, in ListInput) ([]provider.Info, error) {
	return returned(a.list(ctx, in))
}

func (a *Activities) list(ctx context.Context, in ListInput) ([]provider.Info, error) {
	var all []provider.Info
	for _, name := range a.providerNames() {
		pctx, end := a.traceProvider(ctx, "list", name, "")
		infos, err := a.Providers[name].List(pctx, in.Labels)
		end(err)
		if err != nil {
			return nil, fmt.Errorf("list %s sandboxes: %w", name, err)
		}
		all = append(all, infos...)
	}
	return all, nil
}
