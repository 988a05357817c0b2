package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/agenttest"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
)

func TestMain(m *testing.M) {
	linux.Main()
	code := m.Run()
	agenttest.Close()
	os.Exit(code)
}

// newDriver is a driver against the test binary's embedded server and
// a host of the test's, whose model is the driver's own.
func newDriver(t *testing.T) (*driver, provider.Provider) {
	c := agenttest.Client(t)
	d := &driver{c: berth.New(c), m: newModel(), log: testWriter{t}, group: fmt.Sprintf("scale%d", time.Now().UnixNano())}
	srv, err := fakemodel.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.Respond(d.m.respond)
	p := berthtest.Provider(t)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": p}, Outputs: berthtest.Bucket(t),
		Snapshots: snapshot.New(berthtest.Bucket(t)), Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Model: &model.Config{BaseURL: srv.URL, APIKey: fakemodel.Key, Model: fakemodel.Model},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return d, p
}

// sandboxes counts the sandboxes of the test's host provider.
func sandboxes(t *testing.T, p provider.Provider) int {
	t.Helper()
	infos, err := p.List(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// The driver's phases on a small scale: sessions made hibernated from
// a template's snapshot over several managers have no sandbox, and are
// woken to a command in the template's workspace; sessions that boot
// and then hibernate are woken too; a load runs every command once and
// measures each; a command run twice is caught.
func TestDriver(t *testing.T) {
	d, p := newDriver(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	snap, err := d.template(ctx, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	refs, lat, err := d.create(ctx, CreateOptions{N: 12, PerManager: 5, Parallel: 4, HibernateAfter: time.Second, FromSnapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	if made := sandboxes(t, p); made != 0 {
		t.Errorf("%d sandboxes made by hibernated creations", made)
	}
	if len(lat) != 12 || slices.Min(lat) <= 0 {
		t.Fatalf("creation latencies %v", lat)
	}
	if err := d.awaitHibernated(ctx, refs, 4); err != nil {
		t.Fatal(err)
	}
	managers := map[string]bool{}
	for _, r := range refs {
		managers[r.s.Manager] = true
	}
	if len(managers) != 3 {
		t.Errorf("12 sessions, 5 a manager, over %d managers", len(managers))
	}
	found := refs
	woke, err := d.wake(ctx, found, WakeOptions{K: 2, Timeout: 2 * time.Minute, Template: true})
	if err != nil || len(woke) != 2 || slices.Min(woke) <= 0 {
		t.Fatalf("woke %v: %v", woke, err)
	}
	if made := sandboxes(t, p); made != 2 {
		t.Errorf("%d sandboxes after 2 wakes", made)
	}
	// Sessions that boot their sandbox hibernate, and wake, too.
	booted, _, err := d.create(ctx, CreateOptions{N: 2, PerManager: 5, Parallel: 2, HibernateAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.awaitHibernated(ctx, booted, 2); err != nil {
		t.Fatal(err)
	}
	if woke, err := d.wake(ctx, booted, WakeOptions{K: 1, Timeout: 2 * time.Minute}); err != nil || len(woke) != 1 {
		t.Fatalf("woke booted %v: %v", woke, err)
	}

	// The check catches a command run twice: turn 1 again on a
	// session that ran it.
	again := found[0]
	for _, verb := range []string{"scale", "scale"} {
		if res, _ := d.runTurn(ctx, again, verb, 1, 2*time.Minute); !res.ok {
			t.Fatalf("turn 1 on %s: %s", again.info.ID, res.err)
		}
	}
	res, turn := d.runTurn(ctx, again, "check", 2, 2*time.Minute)
	if !res.ok {
		t.Fatalf("check: %s", res.err)
	}
	if lost, twice := checkLog(turn.output, 2); !slices.Equal(lost, []int{2}) || !slices.Equal(twice, []int{1}) {
		t.Errorf("ran.log %q: lost %v, twice %v; want lost [2], twice [1]", turn.output, lost, twice)
	}

	rep, err := d.load(ctx, LoadOptions{C: 3, PerManager: 2, Parallel: 3, Every: time.Second, For: 5 * time.Second, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if rep.Lost != 0 || rep.Twice != 0 || len(rep.Failed) != 0 || rep.Sent < 3 || rep.Done != rep.Sent {
		t.Errorf("load: %s", rep)
	}
	if len(rep.Overhead) != rep.Done || slices.Min(rep.Overhead) <= 0 || slices.Min(rep.Own) <= 0 {
		t.Errorf("load measured overheads %v, own runs %v", rep.Overhead, rep.Own)
	}
}

func TestCheckLog(t *testing.T) {
	lost, twice := checkLog("exit code 0\n1\n2\n2\n4\n9\n", 4)
	if !slices.Equal(lost, []int{3}) || !slices.Equal(twice, []int{9, 2}) {
		t.Errorf("lost %v, twice %v", lost, twice)
	}
	if lost, _ := checkLog("exit code 1\ncat: ran.log: No such file\n", 2); len(lost) != 2 {
		t.Errorf("a failed cat: lost %v", lost)
	}
}
