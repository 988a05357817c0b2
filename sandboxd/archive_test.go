package sandboxd

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
)

// TestExportChanged: files whose status changed since a time come whole;
// the others as headers marked unchanged, with their real size, even
// when their mtime was set back to look old.
func TestExportChanged(t *testing.T) {
	c, ws := serve(t)
	for _, name := range []string{"same.txt", "edited.txt", "touched.txt"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte("before "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // past the filesystem's timestamp granularity
	since := time.Now()
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(ws, "edited.txt"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(ws, "touched.txt"), old, old); err != nil {
		t.Fatal(err)
	}

	rc, err := c.ExportChanged(t.Context(), since)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type entry struct {
		content   string
		unchanged bool
		size      string
	}
	got := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got[hdr.Name] = entry{string(b), hdr.PAXRecords[provider.PAXUnchanged] == "1", hdr.PAXRecords[provider.PAXSize]}
	}
	want := map[string]entry{
		"same.txt":    {"", true, "15"},
		"edited.txt":  {"after", false, ""},
		"touched.txt": {"before touched.txt", false, ""},
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %+v, want %+v", name, got[name], w)
		}
	}

	// Without a time, everything comes whole.
	rc, err = c.Export(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr = tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == "same.txt" && (hdr.Size != 15 || hdr.PAXRecords[provider.PAXUnchanged] != "") {
			t.Errorf("plain export of same.txt: size %d, records %v", hdr.Size, hdr.PAXRecords)
		}
	}
}
