package sandbox_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/sandbox"
)

// TestWireShapes: the handle's own Ref and SnapshotListing, which keep
// activities' types out of its API, encode as those types do: a Ref is in
// the state of workflows running since before they existed, and a listing
// is an activity's result in history.
func TestWireShapes(t *testing.T) {
	same := func(what string, ours, theirs any) {
		t.Helper()
		a, err := json.Marshal(ours)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(theirs)
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Errorf("%s encodes as %s; activities' as %s", what, a, b)
		}
	}
	ref := sandbox.Ref{Provider: "linux", ID: "sb-1", Queue: "q"}
	same("sandbox.Ref", ref, activities.Ref(ref))
	l := sandbox.SnapshotListing{ID: "s", Kind: sandbox.SnapshotUser, Created: time.Unix(1e9, 0).UTC(),
		Labels: map[string]string{"a": "b"}, Files: 1, Size: 2, Stored: 3}
	same("sandbox.SnapshotListing", l, activities.SnapshotListing(l))
	if sandbox.SnapshotUser != activities.SnapshotUser || sandbox.SnapshotCheckpoint != activities.SnapshotCheckpoint {
		t.Errorf("snapshot kinds %q, %q; activities' %q, %q", sandbox.SnapshotUser, sandbox.SnapshotCheckpoint,
			activities.SnapshotUser, activities.SnapshotCheckpoint)
	}
}
