package activities

import (
	"context"
	"errors"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/transfer"
)

// feed gives a command on a terminal its input: the parts of the upload
// stream in.Input, each read once it is stored, applied to the terminal
// in order, then deleted, every transfer.TerminalPoll, until stop.
func (r *execRun) feed(ctx context.Context, a *Activities, term provider.Terminal, in ExecInput, stop <-chan struct{}) {
	tick := time.NewTicker(transfer.TerminalPoll)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for {
			part := int(r.input.Load())
			ok, err := applyInput(ctx, a.Outputs, term, in, part)
			if err != nil || !ok {
				break // not there yet, or the command not yet: next tick
			}
			r.input.Add(1)
		}
	}
}

// applyInput applies part part of a terminal's input, if it is stored,
// and deletes it. A part that is no terminal event is dropped.
func applyInput(ctx context.Context, bucket *blob.Bucket, term provider.Terminal, in ExecInput, part int) (bool, error) {
	key := transfer.PartKey(in.Input, part)
	b, err := bucket.ReadAll(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if ev, err := transfer.DecodeTerminalEvent(b); err == nil {
		if ev.Rows != 0 || ev.Cols != 0 {
			err = term.ResizeTerminal(ctx, in.ID, provider.TerminalSize{Rows: ev.Rows, Cols: ev.Cols})
		} else if len(ev.Keys) > 0 {
			err = term.TerminalInput(ctx, in.ID, ev.Keys)
		}
		// Before the command has its terminal, the part waits; a
		// terminal that will not take it (input full, a bad size)
		// loses it, as a terminal would.
		if errors.Is(err, errdefs.ErrNotFound) {
			return false, err
		}
	}
	_ = bucket.Delete(ctx, key)
	return true, nil
}
