// Package sparsetar writes sparse regular files into a tar stream in the
// GNU sparse 1.0 PAX format, which archive/tar reads but does not write:
// only the data extents travel, and a reader (archive/tar, GNU tar,
// bsdtar) sees the file whole, its holes as zeros. berth's unpackers turn
// runs of zeros back into holes (see ZeroBlock), so a sparse file stays
// small all the way through an export, a snapshot and a restore.
package sparsetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Extent is a run of a file's data: Len bytes at Off.
type Extent struct{ Off, Len int64 }

// MaxExtents bounds the extents of one entry: archive/tar refuses a
// sparse map of more than 1 MiB. Files with more are written with
// neighbouring extents merged (Coalesce).
const MaxExtents = 16 << 10

// BlockSize is the unit in which unpackers look for zeros to skip.
const BlockSize = 4096

// Coalesce merges extents separated by the smallest holes until there
// are at most max: the holes merged are written as zeros.
func Coalesce(ext []Extent, max int) []Extent {
	for gap := int64(BlockSize); len(ext) > max; gap *= 2 {
		out := ext[:1]
		for _, e := range ext[1:] {
			last := &out[len(out)-1]
			if e.Off-(last.Off+last.Len) <= gap {
				last.Len = e.Off + e.Len - last.Off
				continue
			}
			out = append(out, e)
		}
		ext = out
	}
	return ext
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
// ext (in order, not overlapping, inside the size) where its data is. w
// must be the writer under tw: the entry is written there directly, tw
// being flushed first and left ready for the next entry once the returned
// writer is closed.
func WriteHeader(tw *tar.Writer, w io.Writer, hdr *tar.Header, ext []Extent) (*DataWriter, error) {
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	var data int64
	var sparseMap bytes.Buffer
	sparseMap.WriteString(strconv.Itoa(len(ext)) + "\n")
	end := int64(0)
	for _, e := range ext {
		if e.Off < end || e.Len < 0 || e.Off+e.Len > hdr.Size {
			return nil, fmt.Errorf("sparsetar: %q: bad extent %d+%d", hdr.Name, e.Off, e.Len)
		}
		end = e.Off + e.Len
		data += e.Len
		fmt.Fprintf(&sparseMap, "%d\n%d\n", e.Off, e.Len)
	}
	if pad := sparseMap.Len() % blockLen; pad != 0 {
		sparseMap.Write(make([]byte, blockLen-pad))
	}
	physical := int64(sparseMap.Len()) + data

	records := []struct{ k, v string }{
		{"GNU.sparse.major", "1"},
		{"GNU.sparse.minor", "0"},
		{"GNU.sparse.name", hdr.Name},
		{"GNU.sparse.realsize", strconv.FormatInt(hdr.Size, 10)},
		{"mtime", formatTime(hdr.ModTime)},
		{"size", strconv.FormatInt(physical, 10)},
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
	out.Write(sparseMap.Bytes())
	if _, err := w.Write(out.Bytes()); err != nil {
		return nil, err
	}
	pad := int64(0)
	if r := physical % blockLen; r != 0 {
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

// ZeroBlock reports whether b is all zeros: unpackers skip such blocks
// with a seek, leaving a hole, rather than write them.
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
