// Command scale is the driver of bench/scale.sh: it runs berth's scale
// benchmark against a deployment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE)
// through the SDK alone, with a scripted model it serves itself (the
// workers' OPENAI_BASE_URL must reach --model):
//
//  1. idle: a template session writes a file and is kept as a
//     snapshot; N sessions are made hibernated from it (no sandbox is
//     booted; with -boot, each boots one and hibernates it after
//     -hibernate-after), then it waits until all are hibernated;
//  2. wake: K random ones of them, one after another: the latency from
//     the message to its command's start (the first wake restores the
//     template's workspace, which the command reads);
//  3. load: C more sessions, each running a command every second for
//     D: berth's overhead per tool call, and none lost or run twice.
//
// Between phases it runs --hook with the phase's name (up, idle, woke,
// load): the script brings the cluster up (the workers check their
// model as they start, so the model serves first) and measures the
// hosts. docs/cluster.md ("Scale") has the figures and how they were
// made.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/fakemodel"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	group := fs.String("group", "scale", "prefix of the session managers' ids")
	modelAddr := fs.String("model", "127.0.0.1:18080", "where to serve the scripted model (the workers' OPENAI_BASE_URL, less /v1)")
	hook := fs.String("hook", "", "a shell command run between phases, with the phase's name as its argument")
	n := fs.Int("n", 1000, "idle: sessions to make, that hibernate")
	per := fs.Int("per-manager", 100, "sessions per manager (a manager is one person's registry)")
	par := fs.Int("parallel", 16, "creations (and state queries) at a time")
	hib := fs.Duration("hibernate-after", 20*time.Second, "idle: each session's HibernateAfter (with -boot)")
	boot := fs.Bool("boot", false, "idle: boot each session's sandbox and let it hibernate, instead of making each hibernated from the template's snapshot")
	wait := fs.Duration("wait", 4*time.Hour, "idle: how long to wait for all to hibernate")
	k := fs.Int("k", 100, "wake: sessions to wake")
	c := fs.Int("c", 200, "load: concurrent sessions; 0 for no load phase")
	every := fs.Duration("every", time.Second, "load: a command per session this often")
	dur := fs.Duration("for", 10*time.Minute, "load: how long")
	timeout := fs.Duration("timeout", 2*time.Minute, "wake, load: how long one turn may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	d := &driver{m: newModel(), log: os.Stdout, group: *group}
	// The model's address may be the cluster's bridge, which the up
	// hook makes before it starts the workers: listen as soon as it is.
	served := make(chan error, 1)
	lctx, stopListening := context.WithTimeout(ctx, 5*time.Minute)
	defer stopListening()
	go func() {
		for {
			srv, err := fakemodel.Listen(*modelAddr)
			if err == nil {
				srv.Respond(d.m.respond)
				context.AfterFunc(ctx, srv.Close)
				served <- nil
				return
			}
			select {
			case <-lctx.Done():
				served <- fmt.Errorf("the model at %s: %w", *modelAddr, err)
				return
			case <-time.After(50 * time.Millisecond): // the bridge's address comes up
			}
		}
	}()
	runHook := func(phase string) error {
		if *hook == "" {
			return nil
		}
		cmd := exec.CommandContext(ctx, "sh", "-c", *hook+" "+phase)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("hook %s: %w", phase, err)
		}
		return nil
	}
	if err := runHook("up"); err != nil {
		return err
	}
	if err := <-served; err != nil {
		return err
	}
	tc, err := client.Dial(client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS"), Namespace: os.Getenv("TEMPORAL_NAMESPACE"),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return err
	}
	defer tc.Close()
	d.c = berth.New(tc)
	if *n > 0 {
		o := CreateOptions{N: *n, PerManager: *per, Parallel: *par, HibernateAfter: *hib}
		if !*boot {
			if o.FromSnapshot, err = d.template(ctx, *timeout); err != nil {
				return err
			}
			d.logf("template: snapshot %s", o.FromSnapshot)
		}
		refs, err := d.idlePhase(ctx, o, *wait)
		if err != nil {
			return err
		}
		if err := runHook("idle"); err != nil {
			return err
		}
		lat, err := d.wake(ctx, refs, WakeOptions{K: *k, Timeout: *timeout, Template: !*boot})
		if err != nil {
			return err
		}
		d.logf("woke %d of %d hibernated sessions: message to the command's start %s", len(lat), len(refs), quantiles(lat))
		if err := runHook("woke"); err != nil {
			return err
		}
	}
	if *c == 0 {
		return nil
	}
	d.group += "-load"
	rep, err := d.load(ctx, LoadOptions{C: *c, PerManager: *per, Parallel: *par, Every: *every, For: *dur, Timeout: *timeout,
		During: func() error { return runHook("load") }})
	if err != nil {
		return err
	}
	fmt.Print(rep)
	if rep.Lost+rep.Twice > 0 || len(rep.Failed) > 0 {
		return errLoad
	}
	return nil
}

// idlePhase makes the sessions and waits until all have hibernated.
func (d *driver) idlePhase(ctx context.Context, o CreateOptions, wait time.Duration) ([]ref, error) {
	t0 := time.Now()
	refs, lat, err := d.create(ctx, o)
	if err != nil {
		return nil, err
	}
	d.logf("created %d sessions in %s (%.1f/s); creation %s", len(refs), time.Since(t0).Round(time.Second),
		float64(len(refs))/time.Since(t0).Seconds(), quantiles(lat))
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := d.awaitHibernated(wctx, refs, o.Parallel); err != nil {
		return nil, err
	}
	d.logf("all %d sessions hibernated, %s after the first creation", len(refs), time.Since(t0).Round(time.Second))
	return refs, nil
}
