package activities

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/provider"
)

// ProviderQueue is the task queue of the workers, among those polling
// queue, that serve provider name. A sandbox of that provider is created
// there, so that only a worker that can serve it takes its creation.
func ProviderQueue(queue, name string) string { return queue + providerQueueInfix + name }

// IsProviderQueue says whether q is the queue of a provider's workers
// among those polling queue.
func IsProviderQueue(queue, q string) bool {
	return strings.HasPrefix(q, queue+providerQueueInfix)
}

const providerQueueInfix = ".provider."

// Identity is the worker identity of a host's workers: the process
// (pid@hostname, as Temporal's default) and the host's own queue, which
// Hosts reads off the pollers of the shared queue.
func Identity(hostQueue string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%d@%s %s%s", os.Getpid(), host, identityHostQueue, hostQueue)
}

const identityHostQueue = "host-queue="

// RouteInput asks where a sandbox of Provider is created, among the
// workers polling Queue.
type RouteInput struct {
	Queue    string `json:"queue"`
	Provider string `json:"provider"`
}

// RouteOutput says where: Queue is the task queue to create the sandbox
// on. It is empty when no worker serves the provider; Served then lists
// those some worker does serve. Hosts, when there is a choice, are the
// host queues of the workers polling Queue, sorted: placement asks each
// its load and creates the sandbox on the least loaded (see package
// sandbox). It is empty for a provider whose sandboxes take nothing of a
// host's (a hosted one this worker serves) and when one host serves it.
type RouteOutput struct {
	Queue  string   `json:"queue,omitempty"`
	Served []string `json:"served,omitempty"`
	Hosts  []string `json:"hosts,omitempty"`
}

// Route, a local activity, says which task queue a sandbox of
// in.Provider is created on: its provider's queue, when a worker polls
// it. The server lists a worker's polls for a while after its last one
// (five minutes by default), so that a worker restarting is a pause of
// creation, not a failure; a provider nobody polls for is asked of no
// queue, and the workflow fails at once instead of waiting. With several
// hosts polling a host-bound provider's queue, it names them too, for
// placement to choose among.
func (a *Activities) Route(ctx context.Context, in RouteInput) (RouteOutput, error) {
	return returned(a.route(ctx, in))
}

func (a *Activities) route(ctx context.Context, in RouteInput) (RouteOutput, error) {
	q := ProviderQueue(in.Queue, in.Provider)
	if _, ok := a.Providers[in.Provider]; ok && in.Queue == a.GenericQueue {
		if a.HostQueue == a.GenericQueue {
			// One worker serves everything (berth dev): creation stays
			// on the workflow's own queue, where the server hands it to
			// this worker at once (eager dispatch), without a round
			// trip through matching.
			return RouteOutput{Queue: in.Queue}, nil
		}
		if !a.Providers[in.Provider].Capabilities().HostBound {
			return RouteOutput{Queue: q}, nil // this worker polls it, and any may serve it
		}
	}
	hosts, polled, err := a.pollers(ctx, q)
	if err != nil {
		return RouteOutput{}, err
	}
	if _, ok := a.Providers[in.Provider]; ok && in.Queue == a.GenericQueue {
		polled = true // this worker polls it, if not yet
	}
	if polled {
		out := RouteOutput{Queue: q}
		if len(hosts) > 1 {
			out.Hosts = hosts
		}
		return out, nil
	}
	// Nobody serves it: say who serves what, of the providers this
	// binary knows.
	var out RouteOutput
	for _, name := range a.knownProviders() {
		_, own := a.Providers[name]
		polled := own && in.Queue == a.GenericQueue
		if !polled {
			if polled, err = a.polled(ctx, ProviderQueue(in.Queue, name)); err != nil {
				return RouteOutput{}, err
			}
		}
		if polled {
			out.Served = append(out.Served, name)
		}
	}
	return out, nil
}

// knownProviders are the providers this worker's binary links and those
// it serves, sorted.
func (a *Activities) knownProviders() []string {
	names := append(provider.Names(), a.providerNames()...)
	slices.Sort(names)
	return slices.Compact(names)
}

// polled says whether a worker polls queue for activities, or did
// lately. A worker without a client knows only itself.
func (a *Activities) polled(ctx context.Context, queue string) (bool, error) {
	if a.Client == nil {
		return false, nil
	}
	resp, err := a.Client.DescribeTaskQueue(ctx, queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
	if err != nil {
		return false, fmt.Errorf("describe task queue %s: %w", queue, err)
	}
	return len(resp.GetPollers()) > 0, nil
}

// Hosts, a local activity, lists the host queues of the workers polling
// queue for activities, read off their identities (see Identity),
// sorted: the hosts the Providers workflow asks. A host whose worker
// stopped stays listed for a while (five minutes by default): it is
// asked, and does not answer. A worker without a client knows only
// itself.
func (a *Activities) Hosts(ctx context.Context, queue string) ([]string, error) {
	return returned(a.hosts(ctx, queue))
}

func (a *Activities) hosts(ctx context.Context, queue string) ([]string, error) {
	if a.Client == nil {
		return []string{a.HostQueue}, nil
	}
	hosts, _, err := a.pollers(ctx, queue)
	return hosts, err
}

// PollingHosts lists the host queues of the workers polling queue for
// activities, or that did lately (five minutes by default), sorted.
func PollingHosts(ctx context.Context, c client.Client, queue string) ([]string, error) {
	hosts, _, err := (&Activities{Client: c}).pollers(ctx, queue)
	return hosts, err
}

// pollers lists the host queues of the workers polling queue for
// activities, or that did lately, read off their identities, sorted; and
// whether any worker at all does.
func (a *Activities) pollers(ctx context.Context, queue string) (hosts []string, polled bool, err error) {
	if a.Client == nil {
		return nil, false, nil
	}
	resp, err := a.Client.DescribeTaskQueue(ctx, queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
	if err != nil {
		return nil, false, fmt.Errorf("describe task queue %s: %w", queue, err)
	}
	for _, p := range resp.GetPollers() {
		if _, h, ok := strings.Cut(p.GetIdentity(), " "+identityHostQueue); ok && h != "" {
			hosts = append(hosts, h)
		}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts), len(resp.GetPollers()) > 0, nil
}
