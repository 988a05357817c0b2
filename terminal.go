package berth

import (
	"context"
	"io"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/transfer"
	"github.com/berth-dev/berth/workflows"
)

// execTerminal runs a command on a terminal in the standalone sandbox
// sandboxID, of req.TTY's size (the default when nil): what events
// sends, keys and resizes, is its input, and its output is written to
// out as it comes. It returns what became of the command once it ended;
// events is read until then. Each event is one relay write, kept out of
// the workflow's history, and keys typed while one is on its way go in
// the next together.
func (c *Client) execTerminal(ctx context.Context, sandboxID string, req workflows.ExecRequest, out io.Writer, events <-chan transfer.TerminalEvent) (workflows.RunOutput, error) {
	if req.TTY == nil {
		req.TTY = &provider.TerminalSize{}
	}
	updateID := NewID("exec-")
	key, err := transfer.TerminalInputKey(sandboxID, updateID)
	if err != nil {
		return workflows.RunOutput{}, err
	}
	h, err := c.startUpdate(ctx, sandboxID, updateID, workflows.UpdateExec, req)
	if err != nil {
		return workflows.RunOutput{}, err
	}
	sctx, stop := context.WithCancel(ctx)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		c.sendInput(sctx, sandboxID, key, events)
	}()
	f := &follower{c: c, workflow: sandboxID, w: [2]io.Writer{out, io.Discard},
		keys: c.commandKeys(sandboxID, updateID), every: transfer.TerminalPoll}
	res, err := f.follow(ctx, c.execResult(sandboxID, updateID, h))
	stop()
	<-sent
	// What the command did not read; the reaper removes it otherwise.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = c.DeleteStream(dctx, sandboxID, key)
	return res, err
}

// sendInput writes events as the parts of the stream key, in order,
// until ctx ends or events is closed. A write that fails for good ends
// the input: the command's result says the rest.
func (c *Client) sendInput(ctx context.Context, sandboxID, key string, events <-chan transfer.TerminalEvent) {
	part := 0
	send := func(ev transfer.TerminalEvent) bool {
		if err := c.writeChunk(ctx, sandboxID, key, part, ev.Encode()); err != nil {
			return false
		}
		part++
		return true
	}
	var held *transfer.TerminalEvent // a resize that came while keys were merged
	for {
		var ev transfer.TerminalEvent
		if held != nil {
			ev, held = *held, nil
		} else {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-events:
				if !ok {
					return
				}
				ev = e
			}
		}
		if ev.Rows != 0 || ev.Cols != 0 {
			if !send(ev) {
				return
			}
			continue
		}
		keys := ev.Keys
	merge:
		for {
			select {
			case more, ok := <-events:
				if !ok {
					break merge
				}
				if more.Rows != 0 || more.Cols != 0 {
					held = &more
					break merge
				}
				keys = append(keys, more.Keys...)
			default:
				break merge
			}
		}
		for len(keys) > 0 {
			n := min(len(keys), transfer.MaxTerminalKeys)
			if !send(transfer.TerminalEvent{Keys: keys[:n]}) {
				return
			}
			keys = keys[n:]
		}
	}
}
