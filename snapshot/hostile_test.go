package snapshot

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// savedChunk saves a small tree and returns the store, the snapshot and
// the key of the one chunk holding file big, of bigSize bytes.
func savedChunk(t *testing.T) (*Store, Info, string) {
	t.Helper()
	s, _ := newStore(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big"), randomBytes(3, bigSize), 0o644, time.Now())
	info := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{})
	m, err := s.loadManifest(t.Context(), info.ID)
	if err != nil {
		t.Fatal(err)
	}
	return s, info, chunkKey(m.entries[0].Chunks[0].Hash)
}

const bigSize = 2 << 20

func line(b []byte) []byte { return append(b, '\n') }

func compress(t *testing.T, data []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(data, nil)
}

func TestCorruptChunk(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T) []byte // nil: remove the chunk
	}{
		// Of the right length: only the hash tells.
		{"other contents", func(t *testing.T) []byte { return compress(t, randomBytes(4, bigSize)) }},
		{"not zstd", func(*testing.T) []byte { return []byte("garbage") }},
		{"truncated", func(t *testing.T) []byte { return compress(t, randomBytes(3, bigSize))[:1000] }},
		{"too large once decompressed", func(t *testing.T) []byte { return compress(t, make([]byte, 2*maxChunkSize)) }},
		{"missing", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, info, key := savedChunk(t)
			var err error
			if tc.replace == nil {
				err = s.bucket.Delete(t.Context(), key)
			} else {
				err = s.bucket.WriteAll(t.Context(), key, tc.replace(t), nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			rc, err := s.Open(t.Context(), info.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			_, err = io.Copy(io.Discard, rc)
			wantErr(t, err, ErrCorrupt)
		})
	}
}

// writeManifest stores m under id as Save would, however wrong it is.
func writeManifest(t *testing.T, s *Store, id string, m *manifest) {
	t.Helper()
	data, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.bucket.WriteAll(t.Context(), manifestKey(id), data, nil); err != nil {
		t.Fatal(err)
	}
}

func TestHostileManifest(t *testing.T) {
	h := hash{1}
	file := func(p string) *entry {
		return &entry{Path: p, Type: typeFile, Mode: 0o644, Size: 3, Chunks: []*ref{{Hash: h, Len: 3}}}
	}
	ent := func(p string, typ entryType, target string) *entry {
		return &entry{Path: p, Type: typ, Mode: 0o755, Target: target}
	}
	for _, tc := range []struct {
		name    string
		entries []*entry
		edit    func(*header)
	}{
		{"absolute path", []*entry{file("/etc/passwd")}, nil},
		{"dot dot", []*entry{file("../x")}, nil},
		{"dot dot inside", []*entry{file("a/../../x")}, nil},
		{"dot", []*entry{file("a/./b")}, nil},
		{"double slash", []*entry{file("a//b")}, nil},
		{"trailing slash", []*entry{file("a/")}, nil},
		{"empty path", []*entry{file("")}, nil},
		{"NUL", []*entry{file("a\x00b")}, nil},
		{"twice", []*entry{file("a"), file("a")}, nil},
		{"below a file", []*entry{file("a"), file("a/b")}, nil},
		{"file over a directory's contents", []*entry{file("a/b"), file("a")}, nil},
		{"below a symbolic link", []*entry{ent("l", typeSymlink, "/etc"), file("l/passwd")}, nil},
		{"hard link to a later file", []*entry{ent("h", typeHardlink, "a"), file("a")}, nil},
		{"hard link to a directory", []*entry{ent("d", typeDir, ""), ent("h", typeHardlink, "d")}, nil},
		{"hard link outside", []*entry{ent("h", typeHardlink, "../etc/passwd")}, nil},
		{"empty link target", []*entry{ent("l", typeSymlink, "")}, nil},
		{"unknown type", []*entry{ent("c", "chardev", "")}, nil},
		{"NUL in a name", []*entry{file("a\x00b")}, nil},
		{"bad mode", []*entry{{Path: "a", Type: typeDir, Mode: 0o170755}}, nil},
		{"size not the chunks'", []*entry{{Path: "a", Type: typeFile, Size: 4, Chunks: []*ref{{Hash: h, Len: 3}}}}, nil},
		{"empty chunk", []*entry{{Path: "a", Type: typeFile, Chunks: []*ref{{Hash: h}}}}, nil},
		{"chunk too large", []*entry{{Path: "a", Type: typeFile, Size: maxChunkSize + 1, Chunks: []*ref{{Hash: h, Len: maxChunkSize + 1}}}}, nil},
		{"negative offset", []*entry{{Path: "a", Type: typeFile, Size: 3, Chunks: []*ref{{Hash: h, Off: -1, Len: 3}}}}, nil},
		{"fewer entries than announced", []*entry{file("a")}, func(h *header) { h.Entries = 2 }},
		{"more entries than announced", []*entry{file("a"), file("b")}, func(h *header) { h.Entries = 1 }},
		{"wrong totals", []*entry{file("a")}, func(h *header) { h.Size = 1 }},
		{"another id", []*entry{file("a")}, func(h *header) { h.ID = "other" }},
		{"unknown version", []*entry{file("a")}, func(h *header) { h.Version = 99 }},
		{"unknown kind", []*entry{file("a")}, func(h *header) { h.Kind = "forever" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t)
			m := &manifest{header: header{Version: formatVersion, ID: "bad", Kind: KindUser, Entries: len(tc.entries)}, entries: tc.entries}
			for _, e := range tc.entries {
				if e.Type == typeFile {
					m.Files++
					m.Size += e.Size
				}
			}
			if tc.edit != nil {
				tc.edit(&m.header)
			}
			writeManifest(t, s, "bad", m)
			_, err := s.Open(t.Context(), "bad", nil)
			wantErr(t, err, ErrCorrupt)
		})
	}

	t.Run("a good one passes", func(t *testing.T) {
		// The cases above fail for their own reason, not the frame's.
		s, _ := newStore(t)
		m := &manifest{header: header{Version: formatVersion, ID: "good", Kind: KindUser, Entries: 3, Files: 1, Size: 3},
			entries: []*entry{ent("d", typeDir, ""), file("d/a"), ent("d/h", typeHardlink, "d/a")}}
		writeManifest(t, s, "good", m)
		if _, err := s.loadManifest(t.Context(), "good"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("binary", func(t *testing.T) {
		// Entries as bytes, each case one entry after the header.
		good := appendEntry(nil, "", file("a"))
		for _, tc := range []struct {
			name string
			body []byte
		}{
			{"good", good}, // the frame around the others is right
			{"unknown type", []byte{0, 1, 'a', 'x', 0, 0}},
			{"shares more than the previous path", []byte{5, 1, 'a', 'd', 0, 0}},
			{"path too long", binary.AppendUvarint([]byte{0}, maxPathLen+1)},
			{"bad sum flag", []byte{0, 1, 'a', 'f', 0, 0, 3, 7}},
			{"chunk count that lies", binary.AppendUvarint([]byte{0, 1, 'a', 'f', 0, 0, 3, 0}, math.MaxInt32)},
			{"value too large", []byte{0, 1, 'a', 'd', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0}},
			{"truncated", good[:len(good)-3]},
			{"trailing bytes", append(good, 0)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s, _ := newStore(t)
				hdr, err := json.Marshal(header{Version: formatVersion, ID: "raw", Kind: KindUser, Entries: 1, Files: 1, Size: 3})
				if err != nil {
					t.Fatal(err)
				}
				data := compress(t, append(line(hdr), tc.body...))
				if err := s.bucket.WriteAll(t.Context(), manifestKey("raw"), data, nil); err != nil {
					t.Fatal(err)
				}
				_, err = s.loadManifest(t.Context(), "raw")
				if tc.name == "good" {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				wantErr(t, err, ErrCorrupt)
			})
		}
	})
	t.Run("window too large", func(t *testing.T) {
		// A frame that asks the decoder for a 256 MiB window.
		s, _ := newStore(t)
		hdr, err := json.Marshal(header{Version: formatVersion, ID: "wide", Kind: KindUser})
		if err != nil {
			t.Fatal(err)
		}
		// A zstd frame made by hand: magic, a header with only a window
		// descriptor (2^(10+18) bytes), then one raw last block.
		data := line(hdr)
		frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 18 << 3}
		bh := 1 | len(data)<<3
		frame = append(frame, byte(bh), byte(bh>>8), byte(bh>>16))
		frame = append(frame, data...)
		if err := s.bucket.WriteAll(t.Context(), manifestKey("wide"), frame, nil); err != nil {
			t.Fatal(err)
		}
		_, err = s.Stat(t.Context(), "wide")
		wantErr(t, err, ErrCorrupt)
	})
	t.Run("not zstd", func(t *testing.T) {
		s, _ := newStore(t)
		if err := s.bucket.WriteAll(t.Context(), manifestKey("raw"), []byte(`{"version":1}`), nil); err != nil {
			t.Fatal(err)
		}
		_, err := s.Stat(t.Context(), "raw")
		wantErr(t, err, ErrCorrupt)
	})
	t.Run("not JSON", func(t *testing.T) {
		s, _ := newStore(t)
		if err := s.bucket.WriteAll(t.Context(), manifestKey("raw"), compress(t, []byte("\x00\x01 nope")), nil); err != nil {
			t.Fatal(err)
		}
		_, err := s.Stat(t.Context(), "raw")
		wantErr(t, err, ErrCorrupt)
	})
}

func TestHostileTar(t *testing.T) {
	type item struct {
		hdr  tar.Header
		data string
	}
	reg := func(name, data string) item {
		return item{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}, data}
	}
	link := func(name, target string, typ byte) item {
		return item{hdr: tar.Header{Name: name, Typeflag: typ, Linkname: target, Mode: 0o777}}
	}
	for _, tc := range []struct {
		name  string
		items []item
	}{
		{"absolute", []item{reg("/etc/passwd", "x")}},
		{"dot dot", []item{reg("../up", "x")}},
		{"dot dot inside", []item{reg("a/../../x", "x")}},
		{"dot dot after a link", []item{link("l", "..", tar.TypeSymlink), reg("l/x", "x")}},
		{"below a symbolic link", []item{link("l", "/etc", tar.TypeSymlink), reg("l/passwd", "x")}},
		{"below a file", []item{reg("f", "x"), reg("f/x", "x")}},
		{"twice", []item{reg("f", "x"), reg("f", "y")}},
		{"hard link to nothing", []item{link("h", "missing", tar.TypeLink)}},
		{"hard link outside", []item{link("h", "../../etc/passwd", tar.TypeLink)}},
		{"device", []item{{hdr: tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}}},
		{"fifo", []item{{hdr: tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}}}},
		{"empty link target", []item{link("l", "", tar.TypeSymlink)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, it := range tc.items {
				if err := tw.WriteHeader(&it.hdr); err != nil {
					t.Fatal(err)
				}
				if _, err := tw.Write([]byte(it.data)); err != nil {
					t.Fatal(err)
				}
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			s, _ := newStore(t)
			_, err := s.Save(t.Context(), tarSource{buf.Bytes()}, SaveOptions{})
			wantErr(t, err, ErrBadInput)
			if list, err := s.List(t.Context()); err != nil || len(list) != 0 {
				t.Errorf("List after a refused Save: %v, %v", list, err)
			}
		})
	}
	t.Run("not a tar stream", func(t *testing.T) {
		s, _ := newStore(t)
		_, err := s.Save(t.Context(), tarSource{bytes.Repeat([]byte("not tar "), 200)}, SaveOptions{})
		wantErr(t, err, ErrBadInput)
	})
}
