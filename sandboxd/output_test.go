package sandboxd

import (
	"bytes"
	"testing"
)

// readAll reads a stream from off the way an attached reader does.
func readAll(o *output, off int64) (got []byte, skipped int64) {
	buf := make([]byte, 7)
	for {
		n, skip := o.read(off, buf)
		if n == 0 && skip == 0 {
			return got, skipped
		}
		got = append(got, buf[:n]...)
		off += int64(n) + skip
		skipped += skip
	}
}

func TestOutputKeepsHeadAndTail(t *testing.T) {
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	tests := []struct {
		name        string
		head, tail  int
		chunk       int
		off         int64
		want        []byte
		wantSkipped int64
	}{
		{"fits in head", 2000, 100, 13, 0, data, 0},
		{"fits in head and tail", 600, 400, 17, 0, data, 0},
		{"middle forgotten", 100, 200, 31, 0, append(append([]byte{}, data[:100]...), data[800:]...), 700},
		{"offset in head", 100, 200, 64, 50, append(append([]byte{}, data[50:100]...), data[800:]...), 700},
		{"offset in gap", 100, 200, 5, 500, data[800:], 300},
		{"offset in tail", 100, 200, 1000, 900, data[900:], 0},
		{"chunk larger than tail", 10, 50, 1000, 0, append(append([]byte{}, data[:10]...), data[950:]...), 940},
		{"offset at end", 10, 50, 3, 1000, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOutput(tt.head, tt.tail)
			for p := data; len(p) > 0; {
				n := min(tt.chunk, len(p))
				o.write(p[:n])
				p = p[n:]
			}
			if o.total != int64(len(data)) {
				t.Fatalf("total = %d, want %d", o.total, len(data))
			}
			got, skipped := readAll(&o, tt.off)
			if !bytes.Equal(got, tt.want) {
				t.Errorf("read from %d: got %d bytes, want %d", tt.off, len(got), len(tt.want))
			}
			if skipped != tt.wantSkipped {
				t.Errorf("skipped = %d, want %d", skipped, tt.wantSkipped)
			}
		})
	}
}

func TestOutputReleased(t *testing.T) {
	o := newOutput(4, 4)
	o.write([]byte("0123456789"))
	o.release()
	got, skipped := readAll(&o, 3)
	if len(got) != 0 || skipped != 7 {
		t.Errorf("after release: got %q, skipped %d; want nothing, 7 skipped", got, skipped)
	}
}
