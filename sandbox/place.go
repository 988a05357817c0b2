package sandbox

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
)

// Placement: when several hosts serve a host-bound provider, a creation
// asks each of them its load (the Load activity, on its host queue, all
// at once) and is made on the least loaded host the sandbox fits on:
// the one with the smallest share of its capacity in use (the larger of
// sandboxes held over --max-sandboxes and memory limits over
// --max-memory), then the one with fewer sandboxes, then the one this
// sandbox's id ranks first (a hash of the id and the host's name: a
// burst of creations that read the same loads spreads over the hosts,
// where a tie broken by name would send them all to one). A host
// that is full, or stopping, is skipped. A host that does not answer
// within placeAskTimeout is not chosen; once one has answered, the
// others get placeStraggler more.
//
// A host refuses a creation it has no room for (it filled up since it
// answered), at once, with an activities.IsHostFull error, and
// placement starts again. When no host has room, the creation waits,
// asking again with a backoff (placeBackoff to placeBackoffMax), for up
// to the sandbox's placement timeout (WithPlacementTimeout), and then
// fails with an error of kind Quota. With one host, or hosts that do not
// answer, the creation goes to the provider's queue, which any of its
// hosts takes (and refuses, when full, the same way).
//
// Creations placed at the same moment read the same loads. So a
// creation carries the load it read on the host it chose
// (activities.Seen), and the host refuses it when it holds more by
// then (activities.IsHostChanged): another creation took it meanwhile.
// The creation is then placed again at once, on loads read anew. Each
// creation is thus admitted on a host that was least loaded as it was
// admitted, and a burst over equal hosts lands evenly: no two of them
// differ by more than one (6 on 3 empty hosts: 2, 2 and 2).

// placeVersion marks the histories whose creations are placed by load.
const placeVersion = "berth.place"

// placeSeenVersion marks the histories whose creations carry the load
// they were placed on, and are placed again at once when the host's
// changed.
const placeSeenVersion = "berth.place-seen"

// Placement's timings.
const (
	placeAskTimeout  = 2 * time.Second
	placeStraggler   = 300 * time.Millisecond
	placeBackoff     = 250 * time.Millisecond
	placeBackoffMax  = 5 * time.Second
	placeHostTimeout = 10 * time.Second // a chosen host to take the creation it just said it has room for
)

// DefaultPlacementTimeout is how long a creation waits for a host with
// room by default.
const DefaultPlacementTimeout = 2 * time.Minute

// WithPlacementTimeout sets how long a creation (the first, a wake, a
// recovery) waits for a host with room for the sandbox before it fails
// with an error of kind Quota. Zero means DefaultPlacementTimeout.
func WithPlacementTimeout(d time.Duration) Option { return func(c *config) { c.PlacementTimeout = d } }

// place makes the sandbox of spec on the least loaded host of provider
// prov that has room, waiting for one as long as the placement timeout.
// Creation runs to its end even when ctx is canceled meanwhile, so that
// what it made is known.
func (s *Sandbox) place(ctx workflow.Context, prov string, spec provider.Spec) (refs.Sandbox, error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	timeout := s.st.Config.PlacementTimeout
	if timeout <= 0 {
		timeout = DefaultPlacementTimeout
	}
	deadline := workflow.Now(ctx).Add(timeout)
	wait := placeBackoff
	withSeen := workflow.GetVersion(ctx, placeSeenVersion, workflow.DefaultVersion, 1) == 1
	var last error // the last refusal
	for {
		route, err := s.route(ctx, prov)
		if err != nil {
			return refs.Sandbox{}, err
		}
		queue, full := route.Queue, false
		var seen *activities.Seen
		if len(route.Hosts) > 0 {
			var host *activities.Load
			host, full = s.leastLoaded(ctx, prov, spec.Resources.Memory, route.Hosts)
			if host != nil {
				queue = host.Host
				if withSeen {
					seen = &activities.Seen{Sandboxes: host.Sandboxes, Memory: host.Memory}
				}
			}
		}
		if ctx.Err() != nil {
			return refs.Sandbox{}, temporal.NewCanceledError("canceled while the sandbox was being placed")
		}
		remaining := deadline.Sub(workflow.Now(ctx))
		if !full {
			o := s.lifecycle(queue)
			if queue == route.Queue {
				o.ScheduleToStartTimeout = max(remaining, time.Second)
			} else {
				o.ScheduleToStartTimeout = placeHostTimeout
			}
			var ref refs.Sandbox
			err := workflow.ExecuteActivity(workflow.WithActivityOptions(dctx, o), acts.Create,
				activities.CreateInput{Provider: prov, Spec: spec, Seen: seen}).Get(dctx, &ref)
			var timeout *temporal.TimeoutError
			switch {
			case err == nil:
				return ref, nil
			case activities.IsHostChanged(temporalerr.From(err)):
				// Another creation took the host since its load was
				// read: placed again at once, on the loads as they are.
				last = temporalerr.From(err)
				if ctx.Err() == nil && workflow.Now(ctx).Before(deadline) {
					continue
				}
			case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
				// Never started: the chosen host went, or no host took
				// it off the provider's queue in time.
				last = fmt.Errorf("no worker took the creation off queue %s", queue)
			case activities.IsHostFull(temporalerr.From(err)):
				last = temporalerr.From(err)
			default:
				return ref, temporalerr.From(err)
			}
		}
		if ctx.Err() != nil {
			return refs.Sandbox{}, temporal.NewCanceledError("canceled while the sandbox was being placed")
		}
		remaining = deadline.Sub(workflow.Now(ctx))
		if remaining <= 0 {
			why := "every host serving it is full"
			if last != nil {
				why = last.Error()
			}
			return refs.Sandbox{}, errdefs.Errorf(errdefs.Quota, "no host serving provider %q had room for the sandbox within %v: %s", prov, timeout, why)
		}
		if err := workflow.Sleep(ctx, min(wait, remaining)); err != nil {
			return refs.Sandbox{}, temporal.NewCanceledError("canceled while the sandbox was being placed")
		}
		wait = min(2*wait, placeBackoffMax)
	}
}

// leastLoaded asks hosts their load and returns that of the least
// loaded one a sandbox of provider prov with memory limit mem fits on
// (see Placement), or nil; full says that hosts answered and none has room.
// A host whose sandboxes take nothing of its own (a hosted provider's)
// is not chosen: any worker of the provider's queue serves those.
func (s *Sandbox) leastLoaded(ctx workflow.Context, prov string, mem int64, hosts []string) (host *activities.Load, full bool) {
	actx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	sel := workflow.NewSelector(ctx)
	var loads []activities.Load
	pending := len(hosts)
	for _, h := range hosts {
		o := workflow.ActivityOptions{
			TaskQueue: h, ScheduleToStartTimeout: placeAskTimeout, StartToCloseTimeout: placeAskTimeout,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
		}
		f := workflow.ExecuteActivity(workflow.WithActivityOptions(actx, o), acts.Load, activities.LoadInput{Provider: prov, Memory: mem})
		sel.AddFuture(f, func(f workflow.Future) {
			pending--
			var l activities.Load
			if f.Get(ctx, &l) == nil && l.Serves {
				loads = append(loads, l)
			}
		})
	}
	late, timed := false, false
	for pending > 0 && !late {
		sel.Select(ctx)
		if !timed && pending > 0 {
			timed = true
			sel.AddFuture(workflow.NewTimer(actx, placeStraggler), func(workflow.Future) { late = true })
		}
	}
	var best *activities.Load
	for i := range loads {
		l := &loads[i]
		switch {
		case !l.Counted:
			return nil, false
		case !l.Fits || l.Draining:
			continue
		case best == nil, l.Share() < best.Share(),
			l.Share() == best.Share() && (l.Sandboxes < best.Sandboxes || l.Sandboxes == best.Sandboxes && s.ranks(l.Host, best.Host)):
			best = l
		}
	}
	if best == nil {
		return nil, len(loads) > 0
	}
	return best, false
}

// ranks says whether this sandbox ranks host a before host b, for ties
// in placement: by a hash of its base id and each host's name, the same
// on every replay.
func (s *Sandbox) ranks(a, b string) bool {
	rank := func(host string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(s.st.Base + "\x00" + host))
		return h.Sum64()
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra < rb
	}
	return a < b
}

// route asks this workflow's worker where a sandbox of provider prov is
// created (see createQueue).
func (s *Sandbox) route(ctx workflow.Context, prov string) (activities.RouteOutput, error) {
	queue := s.st.Config.Queue
	var out activities.RouteOutput
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, localOptions()), acts.Route,
		activities.RouteInput{Queue: queue, Provider: prov}).Get(ctx, &out)
	if err != nil {
		return out, fmt.Errorf("find a worker for provider %s: %w", prov, temporalerr.From(err))
	}
	if out.Queue == "" {
		return out, &UnservedError{Provider: prov, Queue: queue, Served: out.Served}
	}
	return out, nil
}
