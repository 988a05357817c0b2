package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/errdefs/temporalerr"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/session"
)

// driver runs the benchmark's phases through the SDK alone.
type driver struct {
	c     *berth.Client
	m     *scripted
	log   io.Writer
	group string // prefix of the managers' ids: one per run
}

// managerID is the id of the i-th manager of a group. Sessions are
// spread over managers of PerManager each: a manager is one person's
// registry, carried whole across continue-as-new.
func (d *driver) managerID(i int) string { return fmt.Sprintf("%s-m%04d", d.group, i) }

func (d *driver) logf(format string, args ...any) {
	fmt.Fprintf(d.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// ref is a session of the benchmark.
type ref struct {
	s    *berth.Sessions
	info session.Info
}

// CreateOptions is the create phase's.
type CreateOptions struct {
	N, PerManager, Parallel int
	// HibernateAfter is each session's; sessions never pause first.
	HibernateAfter time.Duration
	// FromSnapshot, when set, is the template every session is made
	// from, hibernated: a creation then makes no sandbox.
	FromSnapshot string
}

// template makes the template session, has it write the template's
// file, and keeps its workspace as a snapshot as it is destroyed: the
// snapshot the idle sessions are made from.
func (d *driver) template(ctx context.Context, timeout time.Duration) (string, error) {
	s := d.c.Sessions(d.group + "-template")
	info, err := s.Create(ctx, session.CreateRequest{Title: "template", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: sandbox.NoIdleTimeout})
	if err != nil {
		return "", fmt.Errorf("create the template session: %s", temporalerr.OneLine(err))
	}
	if res, _ := d.runTurn(ctx, ref{s, info}, "template", 1, timeout); !res.ok {
		return "", fmt.Errorf("the template's turn: %s", res.err)
	}
	kept, err := s.Destroy(ctx, session.DestroyRequest{Session: info.ID, Keep: true})
	if err != nil {
		return "", fmt.Errorf("keep the template's workspace: %s", temporalerr.OneLine(err))
	}
	return kept.Snapshot, nil
}

// create makes N sessions, Parallel at a time, and returns them with
// each creation's latency.
func (d *driver) create(ctx context.Context, o CreateOptions) ([]ref, []time.Duration, error) {
	refs := make([]ref, o.N)
	lat := make([]time.Duration, o.N)
	var next, made atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := d.progress(ctx, "created", &made, int64(o.N))
	defer stop()
	for range max(o.Parallel, 1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= o.N || ctx.Err() != nil {
					return
				}
				s := d.c.Sessions(d.managerID(i / o.PerManager))
				t0 := time.Now()
				info, err := s.Create(ctx, session.CreateRequest{IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: o.HibernateAfter,
					FromSnapshot: o.FromSnapshot, Hibernated: o.FromSnapshot != ""})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("create session %d: %s", i, temporalerr.OneLine(err))
					}
					mu.Unlock()
					return
				}
				refs[i], lat[i] = ref{s, info}, time.Since(t0)
				made.Add(1)
			}
		})
	}
	wg.Wait()
	return refs, lat, firstErr
}

// progress logs count every 15 s until stopped.
func (d *driver) progress(ctx context.Context, what string, count *atomic.Int64, of int64) func() {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d.logf("%s %d/%d", what, count.Load(), of)
			}
		}
	}()
	return cancel
}

// awaitHibernated waits until every session's sandbox is hibernated,
// asking each in turn (the first made hibernate first).
func (d *driver) awaitHibernated(ctx context.Context, refs []ref, parallel int) error {
	var next, done atomic.Int64
	stop := d.progress(ctx, "hibernated", &done, int64(len(refs)))
	defer stop()
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(refs) {
					return
				}
				r := refs[i]
				for {
					st, err := r.s.State(ctx, r.info.ID)
					if err == nil && st.Sandbox.State == sandbox.StateHibernated {
						break
					}
					if ctx.Err() != nil {
						errs <- fmt.Errorf("session %s of %s: not hibernated (%s): %w", r.info.ID, r.s.Manager, st.Sandbox.State, ctx.Err())
						return
					}
					time.Sleep(time.Second) // polling the session's state
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// result of one turn: what the driver measured.
type result struct {
	ok bool
	// total: Send to the call's result at the model; overhead: the
	// tool call's wall time at the model less the command's own;
	// toFirst: Send to the command's start.
	total, overhead, toFirst, own time.Duration
	err                           string
}

// runTurn sends one turn k (or the check) and waits for the model to
// get its call's result.
func (d *driver) runTurn(ctx context.Context, r ref, verb string, k int, timeout time.Duration) (result, *turn) {
	key := fmt.Sprintf("%s %d", r.info.WorkflowID, k)
	t := d.m.expect(key)
	defer d.m.forget(key)
	t.sent = time.Now()
	if _, err := r.s.Send(ctx, r.info.ID, fmt.Sprintf("%s %s", verb, key)); err != nil {
		return result{err: "send: " + temporalerr.OneLine(err)}, t
	}
	select {
	case <-t.done:
	case <-time.After(timeout):
		return result{err: fmt.Sprintf("no tool result within %s", timeout)}, t
	case <-ctx.Done():
		return result{err: ctx.Err().Error()}, t
	}
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	res := result{ok: true, total: t.back.Sub(t.sent)}
	if !t.start.IsZero() {
		res.own = t.end.Sub(t.start)
		res.overhead = t.back.Sub(t.called) - res.own
		res.toFirst = t.start.Sub(t.sent)
	}
	return res, t
}

// WakeOptions is the wake phase's.
type WakeOptions struct {
	K       int
	Timeout time.Duration
	// Template says the sessions were made from the template: each
	// wake's command must find its file.
	Template bool
}

// wake sends K random hibernated sessions, one after another, a turn,
// and returns Send-to-command-start latencies.
func (d *driver) wake(ctx context.Context, refs []ref, o WakeOptions) ([]time.Duration, error) {
	var lat []time.Duration
	verb := "scale"
	if o.Template {
		verb = "wake"
	}
	for _, i := range rand.Perm(len(refs))[:min(o.K, len(refs))] {
		res, t := d.runTurn(ctx, refs[i], verb, 1, o.Timeout)
		if !res.ok || res.toFirst <= 0 {
			return lat, fmt.Errorf("wake session %s of %s: %s", refs[i].info.ID, refs[i].s.Manager, res.err)
		}
		if o.Template && !strings.Contains(t.output, templateMark) {
			return lat, fmt.Errorf("wake session %s of %s: no template's workspace: %q", refs[i].info.ID, refs[i].s.Manager, t.output)
		}
		lat = append(lat, res.toFirst)
	}
	return lat, nil
}

// LoadOptions is the load phase's.
type LoadOptions struct {
	C, PerManager, Parallel int
	Every, For, Timeout     time.Duration
	// During, when set, runs once halfway through (the script measures
	// the hosts under load).
	During func() error
}

// LoadReport is what a load phase measured.
type LoadReport struct {
	Sessions, Sent, Done int
	Lost, Twice          int // commands: by the sessions' ran.log
	Failed               []string
	Overhead, Total, Own []time.Duration
	Elapsed              time.Duration
}

// load makes C sessions that never pause, then has each run a command
// every Every for For (the next turn starts at once when one takes
// longer), then checks each one's ran.log.
func (d *driver) load(ctx context.Context, o LoadOptions) (*LoadReport, error) {
	refs, _, err := d.create(ctx, CreateOptions{N: o.C, PerManager: o.PerManager, Parallel: o.Parallel, HibernateAfter: sandbox.NoIdleTimeout})
	if err != nil {
		return nil, err
	}
	d.logf("load: %d sessions, a command every %s each, for %s", o.C, o.Every, o.For)
	rep := &LoadReport{Sessions: o.C}
	var mu sync.Mutex
	var done atomic.Int64
	sent := make([]int, len(refs))
	stop := d.progress(ctx, "commands done", &done, 0)
	start := time.Now()
	end := start.Add(o.For)
	var wg sync.WaitGroup
	if o.During != nil {
		wg.Go(func() {
			select {
			case <-time.After(o.For / 2):
				if err := o.During(); err != nil {
					d.logf("load: %v", err)
				}
			case <-ctx.Done():
			}
		})
	}
	for i, r := range refs {
		wg.Go(func() {
			// Spread the sessions' ticks over the period.
			next := start.Add(time.Duration(i) * o.Every / time.Duration(len(refs)))
			for k := 1; ; k++ {
				time.Sleep(time.Until(next)) // the session's own pace
				if time.Now().After(end) || ctx.Err() != nil {
					return
				}
				next = next.Add(o.Every)
				sent[i] = k
				res, _ := d.runTurn(ctx, r, "scale", k, o.Timeout)
				mu.Lock()
				rep.Sent++
				if res.ok {
					rep.Done++
					rep.Total = append(rep.Total, res.total)
					rep.Overhead = append(rep.Overhead, res.overhead)
					rep.Own = append(rep.Own, res.own)
				} else {
					rep.Failed = append(rep.Failed, fmt.Sprintf("%s turn %d: %s", r.info.WorkflowID, k, res.err))
				}
				mu.Unlock()
				done.Add(1)
				if !res.ok {
					return // its turns would queue behind the lost one
				}
			}
		})
	}
	wg.Wait()
	stop()
	rep.Elapsed = time.Since(start)
	d.logf("load: checking each session's ran.log")
	d.each(ctx, refs, o.Parallel, func(i int, r ref) {
		res, t := d.runTurn(ctx, r, "check", sent[i]+1, o.Timeout)
		mu.Lock()
		defer mu.Unlock()
		if !res.ok {
			rep.Failed = append(rep.Failed, fmt.Sprintf("%s check: %s", r.info.WorkflowID, res.err))
			rep.Lost += sent[i]
			return
		}
		lost, twice := checkLog(t.output, sent[i])
		rep.Lost += len(lost)
		rep.Twice += len(twice)
		if len(lost)+len(twice) > 0 {
			rep.Failed = append(rep.Failed, fmt.Sprintf("%s: lost %v, twice %v", r.info.WorkflowID, lost, twice))
		}
	})
	d.each(ctx, refs, o.Parallel, func(_ int, r ref) {
		if _, err := r.s.Destroy(ctx, session.DestroyRequest{Session: r.info.ID}); err != nil {
			d.logf("destroy %s: %s", r.info.WorkflowID, temporalerr.OneLine(err))
		}
	})
	return rep, nil
}

// each calls f for every session, parallel at a time.
func (d *driver) each(ctx context.Context, refs []ref, parallel int, f func(int, ref)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(refs) && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				f(i, refs[i])
			}
		})
	}
	wg.Wait()
}

// quantiles says p50, p90, p99 and max of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	r := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s, max %s (n=%d)", r(q(0.5)), r(q(0.9)), r(q(0.99)), r(s[len(s)-1]), len(s))
}

func (r *LoadReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sessions %d, commands sent %d, done %d in %s (%.1f/s), lost %d, ran twice %d\n",
		r.Sessions, r.Sent, r.Done, r.Elapsed.Round(time.Second), float64(r.Done)/r.Elapsed.Seconds(), r.Lost, r.Twice)
	fmt.Fprintf(&b, "berth's overhead per tool call: %s\n", quantiles(r.Overhead))
	fmt.Fprintf(&b, "turn (send to the call's result at the model): %s\n", quantiles(r.Total))
	fmt.Fprintf(&b, "the command's own run: %s\n", quantiles(r.Own))
	for i, f := range r.Failed {
		if i == 10 {
			fmt.Fprintf(&b, "... and %d more\n", len(r.Failed)-10)
			break
		}
		fmt.Fprintf(&b, "failed: %s\n", f)
	}
	return b.String()
}

// errLoad is a load phase that lost or duplicated commands.
var errLoad = errors.New("commands lost or run twice")
