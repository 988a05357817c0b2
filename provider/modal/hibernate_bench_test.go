package modal_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/modal"
	"github.com/berth-dev/berth/provider/modal/modalfake"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/snapshot"
)

// benchWorkspace fills a workspace with 200 files of 64 KiB (12.5 MiB)
// that do not compress.
const benchWorkspace = `cd /workspace && for i in $(seq 200); do head -c 65536 /dev/urandom > f$i; done`

// BenchmarkHibernateWake compares one hibernation and wake of a sandbox
// on Modal, through the fake (no latency added), each way:
//
//   - native: Modal's filesystem snapshot (the fake saves what the
//     machine holds beyond its image), the sandbox terminated, and a new
//     one made from the image, its daemon started again; the image
//     dropped.
//   - checkpoint: berth's own, the workspace read through the daemon
//     into the snapshot store (its parent the previous one, as the
//     handle does), the sandbox terminated, a new one made from the
//     registry image and the checkpoint unpacked into it.
//
// The handle takes both when it hibernates natively, at once: its
// hibernation costs the longer of the two, its wake the native one.
// The fake counts the calls of Modal's API each takes (calls/op) and
// the reads of bytes sent through the tunnel to the daemon
// (tunnel-reads/op; a stream of many MiB is read in many).
func BenchmarkHibernateWake(b *testing.B) {
	ctx := context.Background()
	f, err := modalfake.New(ctx, modalfake.Options{Farm: farm, TokenID: testTokenID, TokenSecret: testTokenSecret})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			b.Errorf("Modal protocol violations:\n%s", strings.Join(v, "\n"))
		}
	}()
	api, err := modal.New(modal.Config{ServerURL: f.URL(), TunnelCA: f.CAFile(), TokenID: testTokenID, TokenSecret: testTokenSecret,
		SnapshotTimeout: 5 * time.Minute, SnapshotTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer api.Close()
	p := remote.New(api, remote.Config{DaemonPath: daemon, Secret: []byte("the modal benchmark's secret"), User: modal.DefaultUser})
	w := p.(provider.Waker)
	n := 0
	calls := func() (int, int) { r := f.Requests("tunnel-read"); return f.AllRequests() - r, r }
	report := func(b *testing.B, c0, r0 int) {
		c, r := calls()
		b.ReportMetric(float64(c-c0)/float64(b.N), "calls/op")
		b.ReportMetric(float64(r-r0)/float64(b.N), "tunnel-reads/op")
	}
	fresh := func(b *testing.B) provider.Sandbox {
		n++
		sb, err := p.Create(ctx, provider.Spec{ID: fmt.Sprintf("bench-%d", n), Lifetime: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		res, err := sb.Exec(ctx, provider.ExecRequest{Shell: benchWorkspace})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("fill the workspace: %v, exit %d", err, res.ExitCode)
		}
		return sb
	}

	b.Run("native", func(b *testing.B) {
		sb := fresh(b)
		c0, r0 := calls()
		for b.Loop() {
			n++
			h, err := sb.(provider.Hibernator).Hibernate(ctx, fmt.Sprintf("h%d", n))
			if err != nil {
				b.Fatal(err)
			}
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
			if sb, err = w.Wake(ctx, provider.Spec{ID: fmt.Sprintf("bench-%d", n), Lifetime: time.Hour}, h); err != nil {
				b.Fatal(err)
			}
			if err := w.Discard(ctx, h); err != nil {
				b.Fatal(err)
			}
		}
		report(b, c0, r0)
		_ = sb.Destroy(ctx)
	})

	b.Run("checkpoint", func(b *testing.B) {
		store := snapshot.New(berthtest.Bucket(b))
		sb := fresh(b)
		c0, r0 := calls()
		parent := ""
		for b.Loop() {
			n++
			id := fmt.Sprintf("cp-%d", n)
			if _, err := store.Save(ctx, snapshot.SandboxSource(sb), snapshot.SaveOptions{ID: id, Kind: snapshot.KindCheckpoint, Parent: parent}); err != nil {
				b.Fatal(err)
			}
			parent = id
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
			if sb, err = p.Create(ctx, provider.Spec{ID: fmt.Sprintf("bench-%d", n), Lifetime: time.Hour}); err != nil {
				b.Fatal(err)
			}
			rc, err := store.Open(ctx, id, nil)
			if err != nil {
				b.Fatal(err)
			}
			err = sb.Import(ctx, rc)
			rc.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
		report(b, c0, r0)
		_ = sb.Destroy(ctx)
	})
}
