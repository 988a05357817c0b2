// Command scale is the driver of bench/scale.sh: it runs berth's scale
// benchmark's phases against a running deployment (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE), through the SDK alone, with a scripted model it
// serves itself (the workers' OPENAI_BASE_URL must reach --model).
//
//	scale create -n 10000      # N sessions that hibernate, then wait until all have
//	scale wake -k 100          # K random ones of them, one after another: latency to the first command
//	scale load -c 200 -for 10m # C sessions, a command each every second: berth's overhead per call, none lost or run twice
//
// docs/cluster.md ("Scale") has the figures and how they were made.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"log/slog"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/fakemodel"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: scale create|wake|load [flags]")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, phase string, args []string) error {
	fs := flag.NewFlagSet(phase, flag.ContinueOnError)
	group := fs.String("group", "scale", "prefix of the session managers' ids")
	modelAddr := fs.String("model", "127.0.0.1:18080", "where to serve the scripted model (the workers' OPENAI_BASE_URL, less /v1)")
	n := fs.Int("n", 1000, "create: sessions to make")
	per := fs.Int("per-manager", 100, "sessions per manager (a manager is one person's registry)")
	par := fs.Int("parallel", 16, "creations (and state queries) at a time")
	hib := fs.Duration("hibernate-after", 20*time.Second, "create: each session's HibernateAfter")
	wait := fs.Duration("wait", 4*time.Hour, "create: how long to wait for all to hibernate")
	k := fs.Int("k", 100, "wake: sessions to wake")
	c := fs.Int("c", 200, "load: concurrent sessions")
	every := fs.Duration("every", time.Second, "load: a command per session this often")
	dur := fs.Duration("for", 10*time.Minute, "load: how long")
	timeout := fs.Duration("timeout", 2*time.Minute, "wake, load: how long one turn may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tc, err := client.Dial(client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS"), Namespace: os.Getenv("TEMPORAL_NAMESPACE"),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return err
	}
	defer tc.Close()
	d := &driver{c: berth.New(tc), m: newModel(), log: os.Stdout, group: *group}
	if phase != "create" {
		srv, err := fakemodel.Listen(*modelAddr)
		if err != nil {
			return err
		}
		defer srv.Close()
		srv.Respond(d.m.respond)
	}
	switch phase {
	case "create":
		return d.createPhase(ctx, CreateOptions{N: *n, PerManager: *per, Parallel: *par, HibernateAfter: *hib}, *wait)
	case "wake":
		return d.wakePhase(ctx, WakeOptions{K: *k, Timeout: *timeout})
	case "load":
		rep, err := d.load(ctx, LoadOptions{C: *c, PerManager: *per, Parallel: *par, Every: *every, For: *dur, Timeout: *timeout})
		if err != nil {
			return err
		}
		fmt.Print(rep)
		if rep.Lost+rep.Twice > 0 || len(rep.Failed) > 0 {
			return errLoad
		}
		return nil
	}
	return fmt.Errorf("unknown phase %q: create, wake or load", phase)
}

func (d *driver) createPhase(ctx context.Context, o CreateOptions, wait time.Duration) error {
	t0 := time.Now()
	refs, lat, err := d.create(ctx, o)
	if err != nil {
		return err
	}
	d.logf("created %d sessions in %s (%.1f/s); creation %s", len(refs), time.Since(t0).Round(time.Second),
		float64(len(refs))/time.Since(t0).Seconds(), quantiles(lat))
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := d.awaitHibernated(wctx, refs, o.Parallel); err != nil {
		return err
	}
	d.logf("all %d sessions hibernated, %s after the first creation", len(refs), time.Since(t0).Round(time.Second))
	return nil
}

func (d *driver) wakePhase(ctx context.Context, o WakeOptions) error {
	refs, err := d.sessions(ctx)
	if err != nil {
		return err
	}
	lat, err := d.wake(ctx, refs, o)
	if err != nil {
		return err
	}
	d.logf("woke %d of %d hibernated sessions: message to the command's start %s", len(lat), len(refs), quantiles(lat))
	return nil
}
