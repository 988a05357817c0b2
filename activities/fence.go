package activities

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// A host asks a sandbox's owner workflow about it in two ways, each
// named for the sandbox (its first incarnation's id, the label
// LabelSandbox), so that a workflow with several sandboxes answers for
// each: a Query, whether the copy the host holds is still the one the
// workflow uses (a host that comes back destroys those that are not),
// and an Update, asking it to hibernate the sandbox now if it is idle,
// so that it wakes on another host (a host draining as it stops).
const (
	QueryIncarnation = "berth.sandbox.incarnation/" // + base -> Incarnation
	UpdateDrain      = "berth.sandbox.drain/"       // + base, DrainInput -> DrainResult
	// LabelSandbox, on a sandbox, names its first incarnation (the base
	// of its ids: base, base-2, base-3...).
	LabelSandbox = "berth.sandbox"
	// LabelHostTimeout, on a sandbox, is its workflow's host timeout in
	// milliseconds: how long its operations wait for its host before it
	// is taken for lost. The host fences it well within that once cut
	// from the server (HostTimeoutOf).
	LabelHostTimeout = "berth.host-timeout"
)

// HostTimeoutOf reads LabelHostTimeout from a sandbox's labels; def when
// it is missing or not a positive number (a sandbox from before it).
func HostTimeoutOf(labels map[string]string, def time.Duration) time.Duration {
	ms, err := strconv.ParseInt(labels[LabelHostTimeout], 10, 64)
	if err != nil || ms <= 0 {
		return def
	}
	return time.Duration(ms) * time.Millisecond
}

// Incarnation is the sandbox a workflow's handle uses now.
type Incarnation struct {
	ID         string `json:"id"`
	Queue      string `json:"queue"`
	Generation int    `json:"generation"`
	// Live says the handle holds it: running or paused, not hibernated,
	// lost or stopped.
	Live bool `json:"live"`
}

// DrainInput asks a workflow to hibernate its sandbox ID once no
// operation is under way in it, waiting up to Wait for that.
type DrainInput struct {
	ID   string        `json:"id"`
	Wait time.Duration `json:"wait,omitempty"`
}

// DrainResult says what a drain Update did: Hibernated, or why not.
type DrainResult struct {
	Hibernated bool   `json:"hibernated,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Base and Generation read a sandbox id made by package sandbox: base,
// or base-N for its N-th incarnation.
func Base(id string) (base string, generation int) {
	if i := strings.LastIndexByte(id, '-'); i > 0 && strings.Count(id, "-") >= 2 {
		if n, err := strconv.Atoi(id[i+1:]); err == nil && n > 1 {
			return id[:i], n
		}
	}
	return id, 1
}

// Superseded says whether the copy of sandbox id (of base base) a host
// on hostQueue holds is one its owner workflow (workflowID, latest run)
// no longer uses: an older incarnation than the handle's, or the
// handle's but no longer live, or held on another host. A copy newer
// than the handle's is being made, and is kept. An owner that cannot
// answer (a workflow from before the query, a worker down) keeps it:
// the reaper asks again at its next pass. An empty hostQueue does not
// compare hosts (a hosted provider's sandbox is any worker's).
func Superseded(ctx context.Context, c client.Client, workflowID, hostQueue, base, id string) (bool, error) {
	if base == "" {
		base, _ = Base(id)
	}
	_, gen := Base(id)
	if !strings.HasPrefix(id, base) {
		return false, nil
	}
	v, err := c.QueryWorkflow(ctx, workflowID, "", QueryIncarnation+base)
	var (
		notFound *serviceerror.NotFound
		query    *serviceerror.QueryFailed
	)
	switch {
	case errors.As(err, &notFound), errors.As(err, &query):
		return false, nil // closed (the reaper's to destroy), or no such query: it cannot tell
	case err != nil:
		return false, err
	}
	var cur Incarnation
	if err := v.Get(&cur); err != nil || cur.ID == "" {
		return false, nil
	}
	switch {
	case gen < cur.Generation:
		return true, nil
	case gen > cur.Generation:
		return false, nil
	}
	return cur.ID == id && (!cur.Live || hostQueue != "" && cur.Queue != hostQueue), nil
}
