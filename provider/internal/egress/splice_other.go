//go:build !linux

package egress

import (
	"net"
	"syscall"
)

// pipeDir is Linux's splice; elsewhere the relay copies through
// io.CopyN and leaves the kernel's buffers as they are.
type pipeDir struct {
	src, dst syscall.RawConn
	pipeCap  int
}

func newPipeDir(dst, src net.Conn) *pipeDir    { return nil }
func (d *pipeDir) close()                      {}
func (d *pipeDir) move(int) (int, error)       { return 0, nil }
func setBuffer(syscall.RawConn, bool, int) int { return 0 }
func setBuffers(net.Conn)                      {}
func setConnBuffers(net.Conn, int, int)        {}
func discardUnsent(net.Conn)                   {}
