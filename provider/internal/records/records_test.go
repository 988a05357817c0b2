package records

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

type rec struct {
	Base
	Payload string `json:"payload"`
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sb-1.json")
	want := rec{Base: NewBase(provider.Spec{ID: "sb-1", Labels: map[string]string{"a": "b"}}, provider.Resources{}), Payload: "x"}
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	var got rec
	if err := Read(path, "sb-1", &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || got.Payload != want.Payload || !got.ExpiresAt.Equal(want.ExpiresAt) || got.Labels["a"] != "b" {
		t.Errorf("Read = %+v, want %+v", got, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if err := Exists(path, "sb-1"); err != nil {
		t.Errorf("Exists: %v", err)
	}
}

// TestReadRefuses covers what a reader may find at a record's path: none,
// a torn or corrupt file, one too large.
func TestReadRefuses(t *testing.T) {
	tests := []struct {
		name     string
		content  *string // nil: no file
		notFound bool
	}{
		{"missing", nil, true},
		{"empty", ptr(""), false},
		{"torn", ptr(`{"id": "sb-1", "payl`), false},
		{"not json", ptr("garbage"), false},
		{"too large", ptr(`{"payload": "` + strings.Repeat("x", maxRecord) + `"}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sb-1.json")
			if tt.content != nil {
				if err := os.WriteFile(path, []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var got rec
			err := Read(path, "sb-1", &got)
			if err == nil {
				t.Fatalf("Read succeeded, payload of %d bytes", len(got.Payload))
			}
			if errors.Is(err, errdefs.ErrNotFound) != tt.notFound {
				t.Errorf("Read: %v; not found is %v, want %v", err, errors.Is(err, errdefs.ErrNotFound), tt.notFound)
			}
			if !strings.Contains(err.Error(), "sb-1") {
				t.Errorf("Read: %v does not name the sandbox", err)
			}
			if tt.notFound != errors.Is(Exists(path, "sb-1"), errdefs.ErrNotFound) {
				t.Errorf("Exists disagrees with Read on whether the record is there")
			}
		})
	}
}

// TestWriteIsWhole rewrites a record while others read it: every read
// sees one whole version, never a torn or empty one.
func TestWriteIsWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sb-1.json")
	versions := []rec{{Payload: strings.Repeat("a", 64<<10)}, {Payload: strings.Repeat("b", 128<<10)}}
	if err := Write(path, versions[0]); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(stop)
		for i := range 200 {
			if err := Write(path, versions[i%2]); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var got rec
				if err := Read(path, "sb-1", &got); err != nil {
					t.Errorf("read during a write: %v", err)
					return
				}
				if got.Payload != versions[0].Payload && got.Payload != versions[1].Payload {
					t.Errorf("read a payload of %d bytes, neither version", len(got.Payload))
					return
				}
			}
		})
	}
	wg.Wait()
	// A write that died before its rename leaves a temporary file, which
	// neither the record nor IDs sees.
	if err := os.WriteFile(path+".tmp-dead", []byte(`{"payl`), 0o600); err != nil {
		t.Fatal(err)
	}
	var got rec
	if err := Read(path, "sb-1", &got); err != nil || got.Payload != versions[1].Payload {
		t.Errorf("after a torn write: Read = %d bytes, %v; want the last whole version", len(got.Payload), err)
	}
	ids, err := IDs(filepath.Dir(path), ".json")
	if err != nil || !slices.Equal(ids, []string{"sb-1"}) {
		t.Errorf("IDs = %v, %v; want [sb-1]", ids, err)
	}
}

func TestIDs(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"sb-1.json", "sb-2.json", "-bad.json", "sb-3.json.tmp-ab12", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"sb-4", ".hidden"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		suffix string
		want   []string
	}{
		{".json", []string{"sb-1", "sb-2"}},
		{"", []string{"sb-4"}},
	}
	for _, tt := range tests {
		t.Run("suffix "+tt.suffix, func(t *testing.T) {
			got, err := IDs(dir, tt.suffix)
			slices.Sort(got)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("IDs = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	have := map[string]string{"team": "a", "job": "1"}
	tests := []struct {
		name string
		want map[string]string
		ok   bool
	}{
		{"nothing wanted", nil, true},
		{"one of two", map[string]string{"team": "a"}, true},
		{"both", map[string]string{"team": "a", "job": "1"}, true},
		{"other value", map[string]string{"team": "b"}, false},
		{"missing key", map[string]string{"owner": ""}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Matches(have, tt.want); got != tt.ok {
				t.Errorf("Matches(%v, %v) = %v", have, tt.want, got)
			}
		})
	}
}

func TestStale(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old")
	for _, f := range []string{old, filepath.Join(dir, "new")} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	then := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(old, then, then); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range Stale(dir, time.Minute) {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"old"}) {
		t.Errorf("Stale = %v, want [old]", names)
	}
	if got := Stale(filepath.Join(dir, "none"), time.Minute); len(got) != 0 {
		t.Errorf("Stale of a missing dir = %v", got)
	}
}

func ptr(s string) *string { return &s }
