package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// checkTimeout bounds each provider's Check (provider.Checker): a
// service that has not answered by then is shown as not answering. The
// checks run at once, so the host's answer comes within this bound
// however many services are slow, and well within the time berth
// providers waits for it.
const checkTimeout = 5 * time.Second

// ProviderStatuses describes the providers this worker serves and those
// its binary links but could not open. Of a provider over a service
// (provider.Checker), it checks the service, all of them at once, each
// within checkTimeout, and says how it failed (Availability's
// ServiceError and ServiceKind).
func (a *Activities) ProviderStatuses(ctx context.Context) ([]provider.Availability, error) {
	names := a.providerNames()
	out := make([]provider.Availability, len(names), len(names)+len(a.Unavailable))
	var wg sync.WaitGroup
	for i, name := range names {
		p := a.Providers[name]
		caps := p.Capabilities()
		out[i] = provider.Availability{Name: name, Host: a.HostQueue, Available: true, Capabilities: &caps}
		if r, ok := p.(provider.Reporter); ok {
			out[i].Note = r.Report()
		}
		if c, ok := p.(provider.Checker); ok {
			wg.Go(func() { out[i].ServiceKind, out[i].ServiceError = check(ctx, c) })
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, u := range a.Unavailable {
		if _, served := a.Providers[u.Name]; !served {
			u.Host = a.HostQueue
			out = append(out, u)
		}
	}
	return out, nil
}

// check asks c whether its service answers, within checkTimeout, and
// says how it failed: its kind and first line, or nothing. A Check that
// overruns its context is not waited for: it ends on its own.
func check(ctx context.Context, c provider.Checker) (errdefs.Kind, string) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Check(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	switch {
	case err == nil:
		return "", ""
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// Whatever the Check made of its deadline, this is what it means.
		return errdefs.ProviderUnavailable, fmt.Sprintf("the service did not answer within %v", checkTimeout)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(err.Error()), "\n")
	return errdefs.KindOf(err), line
}
