package sparsetar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Reader reads a tar stream as archive/tar does, except for the sparse
// files WriteHeader writes (GNU sparse 0.1): for those, Extents says
// where the data goes and Read returns the data alone, never a hole's
// zeros. Other sparse formats are read as archive/tar reads them, holes
// as zeros; Foreign tells them apart, so that a reader that must not pay
// for holes can leave them out.
type Reader struct {
	src *owingReader
	tr  *tar.Reader

	sparse bool
	ext    []Extent
	left   int64 // data bytes of the sparse entry not read yet
}

// NewReader reads the tar stream r.
func NewReader(r io.Reader) *Reader {
	src := &owingReader{r: r}
	return &Reader{src: src, tr: tar.NewReader(src)}
}

// owingReader is what the tar reader reads. The data of a sparse entry
// is read from the stream by Reader itself, and so owed to the tar
// reader, which skips an entry's data section when it moves to the next
// one: the bytes it skips are handed back without the stream being read
// again. The tar reader never reads a data section otherwise than through
// Read, which Reader does not call for a sparse entry.
type owingReader struct {
	r    io.Reader
	owed int64
}

func (o *owingReader) Read(p []byte) (int, error) {
	if o.owed > 0 {
		n := int(min(int64(len(p)), o.owed))
		o.owed -= int64(n)
		return n, nil // the tar reader skips these bytes: their value does not matter
	}
	return o.r.Read(p)
}

// Next moves to the next entry, as tar.Reader's Next does. A sparse
// entry's header has its logical size.
func (r *Reader) Next() (*tar.Header, error) {
	r.sparse, r.ext, r.left = false, nil, 0
	hdr, err := r.tr.Next()
	if err != nil {
		return hdr, err
	}
	if r.src.owed != 0 {
		// The tar reader skipped less than was read for it.
		return nil, fmt.Errorf("%w: sparsetar: the stream lost its place", tar.ErrHeader)
	}
	if hdr.Typeflag != tar.TypeReg || hdr.PAXRecords["GNU.sparse.major"] != "0" || hdr.PAXRecords["GNU.sparse.minor"] != "1" {
		return hdr, nil
	}
	// archive/tar checked the map (numbers, order, inside the size)
	// before returning the header; it is read again here.
	ext, data, err := parseMap(hdr.PAXRecords["GNU.sparse.map"])
	if err != nil {
		return nil, fmt.Errorf("%w: sparsetar: %q: %v", tar.ErrHeader, hdr.Name, err)
	}
	// The data section must be the extents' data and nothing else: the
	// tar reader skips what the size record says, Read reads what the
	// map says.
	if physical, err := strconv.ParseInt(hdr.PAXRecords["size"], 10, 64); err != nil || physical != data {
		return nil, fmt.Errorf("%w: sparsetar: %q: the map holds %d bytes of data, the entry %q", tar.ErrHeader, hdr.Name, data, hdr.PAXRecords["size"])
	}
	r.sparse, r.ext, r.left = true, ext, data
	return hdr, nil
}

// parseMap reads a 0.1 map, "off,len,off,len...", dropping empty
// extents, and returns the bytes of data it holds.
func parseMap(s string) ([]Extent, int64, error) {
	if s == "" {
		return nil, 0, nil
	}
	nums := strings.Split(s, ",")
	if len(nums)%2 != 0 || len(nums) > 2*MaxExtents {
		return nil, 0, errors.New("bad sparse map")
	}
	var ext []Extent
	var data, end int64
	for i := 0; i < len(nums); i += 2 {
		off, err1 := strconv.ParseInt(nums[i], 10, 64)
		n, err2 := strconv.ParseInt(nums[i+1], 10, 64)
		if err1 != nil || err2 != nil || off < end || n < 0 || n > 1<<62-off {
			return nil, 0, errors.New("bad sparse map")
		}
		if n > 0 {
			ext = append(ext, Extent{Off: off, Len: n})
		}
		end, data = off+n, data+n
	}
	return ext, data, nil
}

// Extents returns where the current entry's data goes, in order, and
// true, for a sparse entry that WriteHeader wrote; Read then returns the
// bytes of these extents one after the other. Otherwise it returns
// false, and Read the entry's whole contents.
func (r *Reader) Extents() ([]Extent, bool) { return r.ext, r.sparse }

// Foreign reports whether hdr is a sparse file in a format other than
// the one WriteHeader writes: its holes are read as zeros.
func Foreign(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	if hdr.Typeflag != tar.TypeReg {
		return false
	}
	major, minor := hdr.PAXRecords["GNU.sparse.major"], hdr.PAXRecords["GNU.sparse.minor"]
	if major == "0" && minor == "1" {
		return false
	}
	return major != "" || minor != "" || hdr.PAXRecords["GNU.sparse.map"] != "" ||
		hdr.PAXRecords["GNU.sparse.numblocks"] != "" || hdr.PAXRecords["GNU.sparse.offset"] != ""
}

// Read reads the current entry's data: see Extents.
func (r *Reader) Read(p []byte) (int, error) {
	if !r.sparse {
		return r.tr.Read(p)
	}
	if r.left == 0 {
		return 0, io.EOF
	}
	n, err := r.src.r.Read(p[:min(int64(len(p)), r.left)])
	r.left -= int64(n)
	r.src.owed += int64(n)
	switch {
	case err == io.EOF && r.left > 0:
		err = io.ErrUnexpectedEOF
	case err == io.EOF:
		err = nil
	}
	return n, err
}
