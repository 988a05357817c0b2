//go:build !linux

package egress

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/berth-dev/berth/errdefs"
)

func originalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, fmt.Errorf("%w: egress: transparent mode needs Linux's SO_ORIGINAL_DST", errdefs.ErrUnsupported)
}
