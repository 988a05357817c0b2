package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/berth-dev/berth/hostworker"
)

// stoppingHelp says what stopping berth dev or berth worker does, for
// their --help.
const stoppingHelp = `Stopping (SIGTERM, or SIGINT: Ctrl-C): it drains, then stops. Draining,
it takes no new sandbox (other hosts get them) and, when another host
serves their provider, asks the workflow of each of its sandboxes to
hibernate it once no command runs in it, waiting up to --stop-timeout: checkpointed and destroyed, each wakes on
another host at its next operation. Then it stops taking work, lets the
commands still under way finish for up to --stop-timeout more, pauses
every sandbox of this host still running (noting which in the data
directory) and exits 0; a second signal ends it at once. At the next
start it lists what it holds, destroys the sandboxes whose owner
workflow closed meanwhile, and those whose workflow moved them to
another host meanwhile (unless --reap-every is 0), and leaves the others
to their workflows: the next operation on a paused one (sandbox exec,
session send) resumes it, and one idle past its hibernate-after is
hibernated. Killed instead (SIGKILL, a crash), its sandboxes run on, and
are found again the same way.`

// shutdown stops the host as a signal asks (hostworker.Host.Shutdown)
// and says what it paused.
func shutdown(ctx context.Context, h *hostworker.Host, log *slog.Logger, name string, stopTimeout time.Duration) error {
	log.Info(name+" is stopping", "stop-timeout", stopTimeout)
	// The signal ended ctx; pausing gets time of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	parked, err := h.Shutdown(ctx)
	ids := make([]string, len(parked))
	for i, r := range parked {
		ids[i] = r.ID
	}
	if err != nil {
		log.Warn(name+" stopped; not every sandbox could be paused", "paused", ids, "error", err)
		return nil
	}
	log.Info(name+" stopped", "paused", ids)
	return nil
}

// hostStopTimeout is --stop-timeout as hostworker takes it: 0 on the
// command line means no time at all.
func hostStopTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// orphanSampling is how often a host counts orphaned sandboxes: only
// when it serves metrics.
func orphanSampling(metricsAddress string) time.Duration {
	if metricsAddress == "" {
		return 0
	}
	return hostworker.DefaultOrphanSampling
}
