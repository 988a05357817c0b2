package sparsetar

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// TestRoundTrip: archive/tar reads what WriteHeader writes, holes as
// zeros, between ordinary entries.
func TestRoundTrip(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	mt := time.Unix(1e9, 123456789)
	tw.WriteHeader(&tar.Header{Name: "before", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644, Format: tar.FormatPAX})
	tw.Write([]byte("abc"))
	name := "dir/" + strings.Repeat("long", 50) + "\xff"
	size := int64(64<<20 + 5)
	ext := []Extent{{0, 5}, {32 << 20, 3}, {size - 2, 2}}
	dw, err := WriteHeader(tw, &b, &tar.Header{Name: name, Mode: 0o755, Size: size, ModTime: mt}, ext)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(dw, "hello")
	io.WriteString(dw, "mid")
	io.WriteString(dw, "ok")
	if err := dw.Close(); err != nil {
		t.Fatal(err)
	}
	tw.WriteHeader(&tar.Header{Name: "after", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("z"))
	tw.Close()
	if b.Len() > 8<<10 {
		t.Errorf("the archive takes %d bytes", b.Len())
	}

	tr := tar.NewReader(&b)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if hdr.Name != name {
			continue
		}
		if hdr.Size != size || hdr.Mode != 0o755 || !hdr.ModTime.Equal(mt) || hdr.Typeflag != tar.TypeReg {
			t.Errorf("header %+v", hdr)
		}
		// Read the places that matter without holding 3 GiB.
		got := map[int64]string{}
		buf := make([]byte, 1<<20)
		var off int64
		for {
			n, err := tr.Read(buf)
			for _, e := range ext {
				if e.Off >= off && e.Off+e.Len <= off+int64(n) {
					got[e.Off] = string(buf[e.Off-off : e.Off-off+e.Len])
				}
			}
			if n > 0 && !ZeroBlock(buf[:n]) && got[off] == "" && off != 0 && off != 32<<20 && off+int64(n) < size-2 {
				t.Fatalf("non-zero data at %d", off)
			}
			off += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if off != size || got[0] != "hello" || got[32<<20] != "mid" || got[size-2] != "ok" {
			t.Errorf("read %d bytes, extents %v", off, got)
		}
	}
	if strings.Join(names, ",") != "before,"+name+",after" {
		t.Errorf("entries %q", names)
	}
}

func TestCoalesce(t *testing.T) {
	var ext []Extent
	for i := range int64(100) {
		ext = append(ext, Extent{i * 10000, 10})
	}
	got := Coalesce(ext, 10)
	if len(got) > 10 || got[0].Off != 0 || got[len(got)-1].Off+got[len(got)-1].Len != 99*10000+10 {
		t.Errorf("Coalesce: %v", got)
	}
}
