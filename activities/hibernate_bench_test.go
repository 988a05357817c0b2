package activities_test

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/snapshot"
)

// makeWorkspace fills a sandbox with about 100 MiB that looks like a
// project: 2,000 source-like text files of 25.6 KiB and five 10 MiB
// binaries that do not compress.
const makeWorkspace = `/usr/bin/python3 - <<'EOF'
import os, random
random.seed(1)
words = [("w%d" % i) for i in range(5000)]
for d in range(40):
    os.makedirs("src/pkg%d" % d, exist_ok=True)
    for f in range(50):
        with open("src/pkg%d/f%d.py" % (d, f), "w") as out:
            out.write(" ".join(random.choice(words) for _ in range(5000))[:26215])
os.makedirs("bin", exist_ok=True)
for i in range(5):
    with open("bin/blob%d" % i, "wb") as out:
        out.write(os.urandom(10 << 20))
EOF`

// benchActivities returns activities on a linux provider and a store of
// their own, and a function running one of them in a test activity
// environment, failing the benchmark on an error.
func benchActivities(b *testing.B) (*activities.Activities, func(activity, in, out any)) {
	acts := &activities.Activities{
		Providers: map[string]provider.Provider{"linux": berthtest.Provider(b)}, Outputs: berthtest.Bucket(b),
		Snapshots: snapshot.New(berthtest.Bucket(b)), GenericQueue: "berth", HostQueue: "berth",
	}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	return acts, func(activity, in, out any) {
		b.Helper()
		v, err := env.ExecuteActivity(activity, in)
		if err != nil {
			b.Fatal(err)
		}
		if out != nil {
			if err := v.Get(out); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkHibernateResume measures what hibernating and waking a
// sandbox with a 100 MiB workspace costs in the activities: snapshot,
// destroy, create, restore (the Temporal round trips, ~10 ms each, come
// on top). "fresh" stores every chunk anew, as the first hibernation of
// a workspace does; "again" is a sandbox woken from its checkpoint and
// hibernated again, as later ones are: only what changed moves.
func BenchmarkHibernateResume(b *testing.B) {
	for _, fresh := range []bool{true, false} {
		name := "again"
		if fresh {
			name = "fresh"
		}
		b.Run(name, func(b *testing.B) {
			acts, run := benchActivities(b)
			var ref refs.Sandbox
			run(acts.Create, activities.CreateInput{Provider: "linux", Spec: provider.Spec{ID: "hib-0"}}, &ref)
			var res activities.ExecOutput
			run(acts.Exec, activities.ExecInput{Sandbox: ref, ID: "make", Shell: makeWorkspace, Timeout: time.Minute}, &res)
			if res.ExitCode != 0 {
				b.Fatalf("making the workspace: %s", res.Stderr.Inline)
			}
			var samples, saves, restores []time.Duration
			var parent string
			var restored activities.RestoreOutput
			i := 0
			for b.Loop() {
				if fresh {
					b.StopTimer()
					acts.Snapshots = snapshot.New(berthtest.Bucket(b))
					b.StartTimer()
				}
				i++
				start := time.Now()
				var info activities.SnapshotInfo
				// As the sandbox handle does: the checkpoint it was woken
				// from is the parent (when the store still has it).
				run(acts.Snapshot, activities.SnapshotInput{Sandbox: ref, ID: fmt.Sprintf("cp-%d", i),
					Kind: activities.SnapshotCheckpoint, Parent: parent, RestoredAt: restored.At}, &info)
				saved := time.Now()
				run(acts.Destroy, ref, nil)
				run(acts.Create, activities.CreateInput{Provider: "linux", Spec: provider.Spec{ID: fmt.Sprintf("hib-%d", i)}}, &ref)
				created := time.Now()
				run(acts.Restore, activities.RestoreInput{Sandbox: ref, Snapshot: info.ID}, &restored)
				parent = info.ID
				samples = append(samples, time.Since(start))
				saves, restores = append(saves, saved.Sub(start)), append(restores, time.Since(created))
				if info.Size < 100<<20 {
					b.Fatalf("snapshot of %d bytes, want 100 MiB", info.Size)
				}
			}
			run(acts.Destroy, ref, nil)
			for _, m := range []struct {
				samples []time.Duration
				unit    string
			}{{samples, "median-ms"}, {saves, "snapshot-ms"}, {restores, "restore-ms"}} {
				slices.Sort(m.samples)
				b.ReportMetric(float64(m.samples[len(m.samples)/2].Microseconds())/1000, m.unit)
			}
		})
	}
}

// BenchmarkCheckpoint measures what one checkpoint of a running sandbox
// costs under a CheckpointPolicy: a 100 MiB workspace (as
// BenchmarkHibernateResume's) in which one file changed since the last
// checkpoint, the parent. Only the changed files are read (the ctimes
// against the parent's start), and only their new chunks stored.
// "first" is the first checkpoint of a workspace, with no parent.
func BenchmarkCheckpoint(b *testing.B) {
	for _, first := range []bool{true, false} {
		name := "changed-one-file"
		if first {
			name = "first"
		}
		b.Run(name, func(b *testing.B) {
			acts, run := benchActivities(b)
			var ref refs.Sandbox
			run(acts.Create, activities.CreateInput{Provider: "linux", Spec: provider.Spec{ID: "ckpt"}}, &ref)
			defer run(acts.Destroy, ref, nil)
			var res activities.ExecOutput
			run(acts.Exec, activities.ExecInput{Sandbox: ref, ID: "make", Shell: makeWorkspace, Timeout: time.Minute}, &res)
			if res.ExitCode != 0 {
				b.Fatalf("making the workspace: %s", res.Stderr.Inline)
			}
			var parent string
			if !first {
				var info activities.SnapshotInfo
				run(acts.Snapshot, activities.SnapshotInput{Sandbox: ref, ID: "ck-0", Kind: activities.SnapshotCheckpoint}, &info)
				parent = info.ID
			}
			var took []time.Duration
			var stored int64
			i := 0
			for b.Loop() {
				i++
				b.StopTimer()
				run(acts.Exec, activities.ExecInput{Sandbox: ref, ID: fmt.Sprintf("change-%d", i),
					Shell: fmt.Sprintf("echo change %d >> src/pkg0/f0.py", i), Timeout: time.Minute}, &res)
				if first {
					acts.Snapshots, parent = snapshot.New(berthtest.Bucket(b)), ""
				}
				b.StartTimer()
				start := time.Now()
				var info activities.SnapshotInfo
				run(acts.Snapshot, activities.SnapshotInput{Sandbox: ref, ID: fmt.Sprintf("ck-%d", i),
					Kind: activities.SnapshotCheckpoint, Parent: parent}, &info)
				took = append(took, time.Since(start))
				stored += info.Stored
				parent = info.ID
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
			b.ReportMetric(float64(stored)/float64(i), "stored-B/op")
		})
	}
}
