package modal_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/modal/modalfake"
)

// populateScript makes, as the sandbox's user, what a hibernation must
// keep: in the workspace an executable, a read-only file, an empty
// file, a symbolic link and a dangling one, a directory of its own
// mode, a hard link; and a file outside the workspace, in the user's
// home, which only a snapshot of the whole filesystem keeps.
const populateScript = `set -e; cd /workspace
printf '#!/bin/sh\necho ran\n' > exe; chmod 0751 exe
echo ro > ro; chmod 0400 ro
: > empty
ln -s exe link; ln -s /nowhere dangling
mkdir d; echo deep > d/deep; chmod 0705 d
ln exe hard
mkdir -p /home/user/.cache; echo outside > /home/user/.cache/tool
sleep 1000 > /dev/null 2>&1 &`

// stateScript describes what populateScript made, and whether its
// sleep runs.
const stateScript = `cd /workspace; for p in exe ro empty link dangling d d/deep hard; do stat -c '%n %a %U %F %s %N' "$p"; done
./exe; cat d/deep; cat /home/user/.cache/tool 2>/dev/null || echo no-outside; [ hard -ef exe ] && echo hard-linked
grep -qx sleep /proc/[0-9]*/comm 2>/dev/null && echo sleeping || echo no-sleep`

func sh(t *testing.T, sb provider.Sandbox, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Shell: script, Stdout: &out, Stderr: &errb})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: %v, exit %d: %s", script, err, res.ExitCode, errb.String())
	}
	return out.String()
}

// hibernatable makes a sandbox holding populateScript's files and
// returns it with its state.
func hibernatable(t *testing.T, p provider.Provider, id string) (provider.Sandbox, string) {
	t.Helper()
	sb, err := p.Create(t.Context(), provider.Spec{ID: id, Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.WithoutCancel(t.Context())) })
	sh(t, sb, populateScript)
	want := sh(t, sb, stateScript)
	if !strings.Contains(want, "hard-linked") || !strings.HasSuffix(want, "\nsleeping\n") {
		t.Fatalf("the sandbox to hibernate: %s", want)
	}
	return sb, want
}

// woken is what stateScript says after a wake: the same files, and no
// process of before.
func woken(state string) string { return strings.TrimSuffix(state, "sleeping\n") + "no-sleep\n" }

func hibernateProvider(t *testing.T, f *modalfake.Server, timeout string) (provider.Provider, provider.Waker) {
	t.Helper()
	pc := settings(t, f)
	pc["snapshot-ttl"], pc["snapshot-timeout"] = "1h", timeout
	p := openProvider(t, pc)
	if !p.Capabilities().Hibernate {
		t.Fatal("the modal provider does not say it hibernates")
	}
	w, ok := p.(provider.Waker)
	if !ok {
		t.Fatal("the modal provider is no provider.Waker")
	}
	return p, w
}

// TestHibernateWake: Modal's filesystem snapshot keeps the whole
// filesystem with its modes, links and empty files, and a new sandbox
// woken from it has them, its daemon started again (commands run) and
// none of the old processes. The snapshot's TTL is the configured one,
// recorded; a retry of the hibernation returns the same snapshot, a
// retry of the wake the same sandbox; Discard drops the image.
func TestHibernateWake(t *testing.T) {
	f := newFake(t, modalfake.Options{})
	p, w := hibernateProvider(t, f, "2m")
	sb, want := hibernatable(t, p, "hib-1")
	before := time.Now()
	h, err := sb.(provider.Hibernator).Hibernate(t.Context(), "hib-1-h1")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if h.ExpiresAt.Before(before.Add(time.Hour-time.Millisecond)) || h.ExpiresAt.After(after.Add(time.Hour)) {
		t.Errorf("the snapshot expires at %v, want an hour after %v", h.ExpiresAt, before)
	}
	if imgs := f.SnapshotImages(); len(imgs) != 1 || imgs[0] != h.Ref {
		t.Errorf("Modal holds snapshots %v, want [%s]", imgs, h.Ref)
	}
	again, err := sb.(provider.Hibernator).Hibernate(t.Context(), "hib-1-h1")
	if err != nil || again != h || f.Requests("TaskSnapshotFilesystem") != 1 {
		t.Errorf("a retried hibernation: %+v, %v, after %d snapshots; want %+v and 1", again, err, f.Requests("TaskSnapshotFilesystem"), h)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	nb, err := w.Wake(t.Context(), provider.Spec{ID: "hib-2", Lifetime: time.Hour}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nb.Destroy(context.WithoutCancel(t.Context())) })
	if got := sh(t, nb, stateScript); got != woken(want) {
		t.Errorf("woken:\n%s\nwant:\n%s", got, woken(want))
	}
	retried, err := w.Wake(t.Context(), provider.Spec{ID: "hib-2", Lifetime: time.Hour}, h)
	if err != nil || retried.ID() != nb.ID() || f.Sandboxes() != 1 {
		t.Errorf("a retried wake: %v; %d sandboxes, want the one", err, f.Sandboxes())
	}
	if err := w.Discard(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if imgs := f.SnapshotImages(); len(imgs) != 0 {
		t.Errorf("after Discard Modal holds %v", imgs)
	}
	if err := w.Discard(t.Context(), h); err != nil {
		t.Errorf("discarding twice: %v", err)
	}
	t.Run("another hibernation", func(t *testing.T) {
		// A sandbox hibernated again under another id (the first's
		// wake failed, say) is snapshotted again: the tag of the first
		// is stale.
		h2, err := nb.(provider.Hibernator).Hibernate(t.Context(), "hib-2-h1")
		if err != nil || h2.Ref == h.Ref {
			t.Errorf("hibernated again: %+v, %v; want a new snapshot", h2, err)
		}
	})
}

// TestHibernateFaults: a snapshot that fails or outlasts its timeout
// fails, typed, and leaves the sandbox running with its files (berth's
// checkpoint reads them then); a snapshot expired, by Modal's word or
// by the clock, wakes nothing and says NotFound.
func TestHibernateFaults(t *testing.T) {
	f := newFake(t, modalfake.Options{})
	p, w := hibernateProvider(t, f, "2s")
	for _, c := range []struct {
		name  string
		fault modalfake.Fault
		kind  error
	}{
		{"fails", modalfake.Fault{Method: "TaskSnapshotFilesystem", Code: codes.FailedPrecondition, Message: "snapshot failed"}, errdefs.ErrBadInput},
		// Held until the SDK's timeout ends the call.
		{"times out", modalfake.Fault{Method: "TaskSnapshotFilesystem", Hold: make(chan struct{})}, errdefs.ErrTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb, want := hibernatable(t, p, "fault-"+strings.ReplaceAll(c.name, " ", "-"))
			f.Inject(c.fault)
			_, err := sb.(provider.Hibernator).Hibernate(t.Context(), sb.ID()+"-h1")
			if !errors.Is(err, c.kind) {
				t.Fatalf("Hibernate: %v, want %v", err, c.kind)
			}
			if got := sh(t, sb, stateScript); got != want {
				t.Errorf("after a failed hibernation:\n%s\nwant:\n%s", got, want)
			}
			if imgs := f.SnapshotImages(); len(imgs) != 0 {
				t.Errorf("Modal holds snapshots %v", imgs)
			}
		})
	}
	t.Run("expired", func(t *testing.T) {
		sb, _ := hibernatable(t, p, "fault-expired")
		h, err := sb.(provider.Hibernator).Hibernate(t.Context(), "fault-expired-h1")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.ExpireImage(h.Ref); err != nil {
			t.Fatal(err)
		}
		n := f.Sandboxes()
		if _, err := w.Wake(t.Context(), provider.Spec{ID: "fault-expired-2"}, h); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("waking from an expired snapshot: %v, want ErrNotFound", err)
		}
		if f.Sandboxes() != n {
			t.Errorf("a wake from an expired snapshot left %d sandboxes, had %d", f.Sandboxes(), n)
		}
		creates := f.Requests("SandboxCreateV2")
		h.ExpiresAt = time.Now().Add(-time.Minute)
		if _, err := w.Wake(t.Context(), provider.Spec{ID: "fault-expired-3"}, h); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("waking from a snapshot past its expiry: %v, want ErrNotFound", err)
		}
		if f.Requests("SandboxCreateV2") != creates {
			t.Error("a wake past the snapshot's expiry asked Modal to create")
		}
	})
	t.Run("bad input", func(t *testing.T) {
		sb, _ := hibernatable(t, p, "fault-bad")
		if _, err := sb.(provider.Hibernator).Hibernate(t.Context(), "no spaces"); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("a bad hibernation id: %v, want ErrBadInput", err)
		}
		bad := provider.Hibernation{Ref: "im-x; rm -rf /", ExpiresAt: time.Now().Add(time.Hour)}
		if _, err := w.Wake(t.Context(), provider.Spec{ID: "fault-bad-2"}, bad); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("a bad snapshot id: %v, want ErrBadInput", err)
		}
	})
}

// Environment of the child process that hibernates (hibernateChild).
const (
	childHibernateEnv = "MODAL_TEST_HIBERNATE" // "SANDBOX-ID HIBERNATION-ID"
	childSettingsEnv  = "MODAL_TEST_SETTINGS"  // server-url, tunnel-ca-file, daemon
)

// hibernateChild is a worker that hibernates one sandbox, to be killed
// in the middle.
func hibernateChild(arg string) {
	ids := strings.Fields(arg)
	s := strings.Fields(os.Getenv(childSettingsEnv))
	p, err := provider.Open(context.Background(), "modal", provider.Config{"server-url": s[0], "tunnel-ca-file": s[1], "daemon": s[2]})
	if err == nil {
		var sb provider.Sandbox
		if sb, err = p.Get(context.Background(), ids[0]); err == nil {
			_, err = sb.(provider.Hibernator).Hibernate(context.Background(), ids[1])
		}
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// TestHibernateWorkerKilled kills (SIGKILL) a worker in the middle of a
// hibernation: while Modal takes the snapshot, and once it is taken but
// not yet recorded. Either way the sandbox runs on with its files, and
// the activity's retry, another worker's, hibernates it whole.
func TestHibernateWorkerKilled(t *testing.T) {
	f := newFake(t, modalfake.Options{})
	p, w := hibernateProvider(t, f, "2m")
	pc := settings(t, f)
	for i, at := range []string{"TaskSnapshotFilesystem", "SandboxTagsSetV2"} {
		t.Run(at, func(t *testing.T) {
			id := "killed-" + string(rune('a'+i))
			sb, want := hibernatable(t, p, id)
			snaps := f.Requests("TaskSnapshotFilesystem")
			held := make(chan struct{}, 1)
			f.Inject(modalfake.Fault{Method: at, Hold: make(chan struct{}), Held: held})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childHibernateEnv+"="+id+" "+id+"-h1",
				childSettingsEnv+"="+pc["server-url"]+" "+pc["tunnel-ca-file"]+" "+daemon)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-held:
			case <-t.Context().Done():
				t.Fatal("the worker never reached ", at)
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
			if err := cmd.Wait(); err == nil {
				t.Fatalf("the killed worker exited 0: %s", stderr.String())
			}
			// The sandbox runs on, whole: berth's checkpoint could read it.
			if got := sh(t, sb, stateScript); got != want {
				t.Errorf("after the worker was killed:\n%s\nwant:\n%s", got, want)
			}
			retry, err := p.Get(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			h, err := retry.(provider.Hibernator).Hibernate(t.Context(), id+"-h1")
			if err != nil {
				t.Fatal(err)
			}
			if n := f.Requests("TaskSnapshotFilesystem") - snaps; n != 2 {
				t.Errorf("%d snapshots taken, want 2 (the killed worker's, the retry's)", n)
			}
			if err := retry.Destroy(t.Context()); err != nil {
				t.Fatal(err)
			}
			nb, err := w.Wake(t.Context(), provider.Spec{ID: id + "-2", Lifetime: time.Hour}, h)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = nb.Destroy(context.WithoutCancel(t.Context())) })
			if got := sh(t, nb, stateScript); got != woken(want) {
				t.Errorf("woken after the retry:\n%s\nwant:\n%s", got, woken(want))
			}
		})
	}
}
