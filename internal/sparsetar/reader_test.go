package sparsetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"time"
)

// TestReaderExtents: a sparse entry of 15 TiB reads as its extents and
// their data alone, between ordinary entries, also when its data is
// left unread; archive/tar reads the same stream whole.
func TestReaderExtents(t *testing.T) {
	const size = 15 << 40
	ext := []Extent{{0, 5}, {7 << 40, 6}, {size - 4, 4}}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range []string{"a", "b"} {
		tw.WriteHeader(&tar.Header{Name: "before-" + name, Typeflag: tar.TypeReg, Size: 3, Mode: 0o644})
		tw.Write([]byte("abc"))
		dw, err := WriteHeader(tw, &b, &tar.Header{Name: name, Mode: 0o600, Size: size, ModTime: time.Unix(1e9, 0)}, ext)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(dw, "hellomiddletail")
		if err := dw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	tw.WriteHeader(&tar.Header{Name: "after", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("z"))
	tw.Close()

	r := NewReader(bytes.NewReader(b.Bytes()))
	var got []string
	for {
		hdr, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		e, sparse := r.Extents()
		switch hdr.Name {
		case "a":
			data, err := io.ReadAll(r)
			if err != nil || string(data) != "hellomiddletail" {
				t.Errorf("a: read %q, %v", data, err)
			}
			fallthrough
		case "b": // its data left unread: Next skips it
			if hdr.Size != size || !sparse || !slices.Equal(e, ext) {
				t.Errorf("%s: %d bytes, sparse %v, extents %v", hdr.Name, hdr.Size, sparse, e)
			}
		default:
			data, _ := io.ReadAll(r)
			if sparse {
				t.Errorf("%s is sparse", hdr.Name)
			}
			got = append(got, hdr.Name+"="+string(data))
		}
	}
	if want := []string{"before-a=abc", "before-b=abc", "after=z"}; !slices.Equal(got, want) {
		t.Errorf("plain entries %q, want %q", got, want)
	}
}

// TestReaderHostile: a map whose data does not match the entry's size,
// and an entry cut short, are errors; other sparse formats are Foreign.
func TestReaderHostile(t *testing.T) {
	entry := func(size string, data string) []byte {
		var pax bytes.Buffer
		for _, kv := range [][2]string{
			{"GNU.sparse.major", "0"}, {"GNU.sparse.minor", "1"}, {"GNU.sparse.size", "1000000"},
			{"GNU.sparse.numblocks", "1"}, {"GNU.sparse.map", "4096,4"}, {"path", "f"}, {"size", size},
		} {
			pax.WriteString(paxRecord(kv[0], kv[1]))
		}
		var out bytes.Buffer
		x, _ := ustarBlock("x", 'x', 0o644, int64(pax.Len()), time.Unix(0, 0))
		out.Write(x)
		out.Write(pax.Bytes())
		out.Write(make([]byte, blockLen-pax.Len()%blockLen))
		h, _ := ustarBlock("f", tar.TypeReg, 0o644, 0, time.Unix(0, 0))
		out.Write(h)
		out.WriteString(data)
		return out.Bytes()
	}
	r := NewReader(bytes.NewReader(entry("5", "abcde")))
	if _, err := r.Next(); !errors.Is(err, tar.ErrHeader) {
		t.Errorf("a map of 4 bytes in an entry of 5: %v, want tar.ErrHeader", err)
	}
	r = NewReader(bytes.NewReader(entry("4", "ab")))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); err != io.ErrUnexpectedEOF {
		t.Errorf("an entry cut short: %v, want io.ErrUnexpectedEOF", err)
	}
	for _, rec := range []map[string]string{
		{"GNU.sparse.major": "1", "GNU.sparse.minor": "0"},
		{"GNU.sparse.map": "0,1", "GNU.sparse.numblocks": "1"},
	} {
		if !Foreign(&tar.Header{Typeflag: tar.TypeReg, PAXRecords: rec}) {
			t.Errorf("%v is not Foreign", rec)
		}
	}
	if !Foreign(&tar.Header{Typeflag: tar.TypeGNUSparse}) || Foreign(&tar.Header{Typeflag: tar.TypeReg}) {
		t.Error("Foreign of the old GNU sparse type, or of a plain file")
	}
}

// TestCoalesceSmallestGaps: only the smallest holes are merged, as few
// as needed.
func TestCoalesceSmallestGaps(t *testing.T) {
	ext := []Extent{{0, 1}, {10, 1}, {1 << 30, 1}, {1<<30 + 2, 1}, {1 << 40, 1}}
	got := Coalesce(ext, 3)
	want := []Extent{{0, 11}, {1 << 30, 3}, {1 << 40, 1}}
	if !slices.Equal(got, want) {
		t.Errorf("Coalesce: %v, want %v", got, want)
	}
}
