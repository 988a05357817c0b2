// Package sparsetar carries sparse regular files through tar streams in
// the GNU sparse 0.1 PAX format, which archive/tar, GNU tar and bsdtar
// read but archive/tar does not write: only the data extents travel, and
// the map of where they go is a PAX record.
//
// archive/tar reads such an entry whole, its holes as zeros, and keeps
// its map to itself: reading a file of 15 TiB with one byte of data
// costs writing 15 TiB of zeros into buffers. [Reader] reads the map
// from the PAX record and the data alone, so that a sparse file costs
// its data, not its size, all the way through an export, a snapshot and
// a restore (internal/untar's WriteExtents writes it back with holes).
package sparsetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Extent is a run of a file's data: Len bytes at Off.
type Extent struct{ Off, Len int64 }

// MaxExtents bounds the extents of one entry: archive/tar refuses PAX
// records of more than 1 MiB, and the map is one (16Ki extents of two
// 19-digit numbers take 640 KiB). Files with more are written with
// neighbouring extents merged (Coalesce).
const MaxExtents = 16 << 10

// BlockSize is the unit in which unpackers look for zeros to skip.
const BlockSize = 4096

// Coalesce merges extents (in order, not overlapping) across the
// smallest holes between them until there are at most max: the holes
// merged are then data, written as zeros. It merges as few holes as it
// must, the smallest first.
func Coalesce(ext []Extent, max int) []Extent {
	if len(ext) <= max || max < 1 {
		return ext
	}
	// gaps[i] is the hole before ext[i+1]; the len(ext)-max smallest go.
	order := make([]int, len(ext)-1)
	for i := range order {
		order[i] = i
	}
	gap := func(i int) int64 { return ext[i+1].Off - (ext[i].Off + ext[i].Len) }
	sort.SliceStable(order, func(a, b int) bool { return gap(order[a]) < gap(order[b]) })
	merge := make([]bool, len(ext)-1)
	for _, i := range order[:len(ext)-max] {
		merge[i] = true
	}
	out := make([]Extent, 0, max)
	out = append(out, ext[0])
	for i, e := range ext[1:] {
		if merge[i] {
			last := &out[len(out)-1]
			last.Len = e.Off + e.Len - last.Off
			continue
		}
		out = append(out, e)
	}
	return out
}

// DataWriter takes a sparse entry's data: the bytes of its extents, in
// order, nothing else.
type DataWriter struct {
	w    io.Writer
	left int64 // data bytes still expected
	pad  int64
}

func (d *DataWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > d.left {
		return 0, errors.New("sparsetar: more data than the extents hold")
	}
	n, err := d.w.Write(p)
	d.left -= int64(n)
	return n, err
}

// Close ends the entry; all its data must have been written.
func (d *DataWriter) Close() error {
	if d.left != 0 {
		return fmt.Errorf("sparsetar: %d bytes of data missing", d.left)
	}
	_, err := d.w.Write(make([]byte, d.pad))
	return err
}

// WriteHeader starts a sparse regular file in the stream: hdr.Name,
// hdr.Mode, hdr.ModTime and hdr.Size (the logical size) describe it,
// ext (in order, not overlapping, inside the size, at most MaxExtents)
// where its data is. w must be the writer under tw: the entry is written
// there directly, tw being flushed first and left ready for the next
// entry once the returned writer is closed.
func WriteHeader(tw *tar.Writer, w io.Writer, hdr *tar.Header, ext []Extent) (*DataWriter, error) {
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	if len(ext) > MaxExtents {
		return nil, fmt.Errorf("sparsetar: %q: %d extents, more than %d", hdr.Name, len(ext), MaxExtents)
	}
	var data int64
	var sparseMap strings.Builder
	end := int64(0)
	for i, e := range ext {
		if e.Off < end || e.Len < 0 || e.Off+e.Len > hdr.Size {
			return nil, fmt.Errorf("sparsetar: %q: bad extent %d+%d", hdr.Name, e.Off, e.Len)
		}
		end = e.Off + e.Len
		data += e.Len
		if i > 0 {
			sparseMap.WriteByte(',')
		}
		fmt.Fprintf(&sparseMap, "%d,%d", e.Off, e.Len)
	}

	// The name is in the path record too: 0.1 readers take it from
	// there, and GNU.sparse.name is how archive/tar and GNU tar 1.0
	// readers find it.
	records := []struct{ k, v string }{
		{"GNU.sparse.major", "0"},
		{"GNU.sparse.minor", "1"},
		{"GNU.sparse.name", hdr.Name},
		{"GNU.sparse.size", strconv.FormatInt(hdr.Size, 10)},
		{"GNU.sparse.numblocks", strconv.Itoa(len(ext))},
		{"GNU.sparse.map", sparseMap.String()},
		{"mtime", formatTime(hdr.ModTime)},
		{"path", hdr.Name},
		{"size", strconv.FormatInt(data, 10)},
	}
	var pax bytes.Buffer
	for _, r := range records {
		pax.WriteString(paxRecord(r.k, r.v))
	}
	var out bytes.Buffer
	xhdr, err := ustarBlock("PaxHeaders.0/GNUSparseFile", 'x', 0o644, int64(pax.Len()), hdr.ModTime)
	if err != nil {
		return nil, err
	}
	out.Write(xhdr)
	out.Write(pax.Bytes())
	if pad := pax.Len() % blockLen; pad != 0 {
		out.Write(make([]byte, blockLen-pad))
	}
	// The ustar size is a placeholder: the "size" record above is the
	// entry's, and may pass what 11 octal digits hold.
	main, err := ustarBlock("GNUSparseFile.0/file", tar.TypeReg, hdr.Mode&0o7777, 0, hdr.ModTime)
	if err != nil {
		return nil, err
	}
	out.Write(main)
	if _, err := w.Write(out.Bytes()); err != nil {
		return nil, err
	}
	pad := int64(0)
	if r := data % blockLen; r != 0 {
		pad = blockLen - r
	}
	return &DataWriter{w: w, left: data, pad: pad}, nil
}

const blockLen = 512

// ustarBlock returns one ustar header block. archive/tar makes it, as a
// regular file's, and the type is set after: it refuses to write the
// PAX header type itself.
func ustarBlock(name string, typ byte, mode, size int64, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: size, ModTime: mtime.Truncate(time.Second), Format: tar.FormatUSTAR})
	if err != nil {
		return nil, err
	}
	blk := b.Bytes()[:blockLen]
	blk[156] = typ
	// The checksum: the sum of the block's bytes, its own field as spaces.
	copy(blk[148:156], "        ")
	sum := 0
	for _, c := range blk {
		sum += int(c)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return blk, nil
}

// paxRecord formats one record: "%d %s=%s\n", the length counting
// itself.
func paxRecord(k, v string) string {
	const padding = 3 // the space, the '=' and the newline
	size := len(k) + len(v) + padding
	size += len(strconv.Itoa(size))
	rec := strconv.Itoa(size) + " " + k + "=" + v + "\n"
	if len(rec) != size { // the length's own digits carried it over
		size = len(rec)
		rec = strconv.Itoa(size) + " " + k + "=" + v + "\n"
	}
	return rec
}

func formatTime(t time.Time) string {
	sec, nsec := t.Unix(), int64(t.Nanosecond())
	if nsec == 0 {
		return strconv.FormatInt(sec, 10)
	}
	if sec < 0 {
		// PAX times are sign and magnitude, not an offset: keep it
		// simple and whole-second for times before 1970.
		return strconv.FormatInt(sec, 10)
	}
	return fmt.Sprintf("%d.%09d", sec, nsec)
}

// ZeroBlock reports whether b is all zeros: unpackers of data that came
// without a map skip such blocks with a seek, leaving a hole, rather than
// write them.
func ZeroBlock(b []byte) bool {
	// bytes.Equal is the runtime's vectorised memequal: several times
	// faster than a loop over the bytes.
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

var zeroBlock [BlockSize]byte
