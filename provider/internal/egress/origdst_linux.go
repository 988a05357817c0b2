package egress

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// originalDst is where a connection that netfilter redirected (REDIRECT,
// DNAT) was going, as conntrack remembers it: SO_ORIGINAL_DST for IPv4,
// IP6T_SO_ORIGINAL_DST for IPv6.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("egress: original destination: %T is not a socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("egress: original destination: %w", err)
	}
	v4 := true
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		v4 = a.AddrPort().Addr().Unmap().Is4()
	}
	var dst netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		if v4 {
			dst, serr = origDst4(int(fd))
			if serr == nil {
				return
			}
		}
		dst, serr = origDst6(int(fd))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("egress: original destination: %w", err)
	}
	return dst, nil
}

func origDst4(fd int) (netip.AddrPort, error) {
	// A sockaddr_in fits in the ip_mreq-sized buffer this getsockopt
	// wrapper passes: family, port (network order), address.
	m, err := unix.GetsockoptIPv6Mreq(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST)
	if err != nil {
		return netip.AddrPort{}, err
	}
	b := m.Multiaddr
	port := binary.BigEndian.Uint16(b[2:4])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
}

func origDst6(fd int) (netip.AddrPort, error) {
	// IPv6MTUInfo begins with a sockaddr_in6, what this getsockopt fills.
	m, err := unix.GetsockoptIPv6MTUInfo(fd, unix.SOL_IPV6, ip6tSoOriginalDst)
	if err != nil {
		return netip.AddrPort{}, err
	}
	pb := (*[2]byte)(unsafe.Pointer(&m.Addr.Port))
	port := binary.BigEndian.Uint16(pb[:])
	return netip.AddrPortFrom(netip.AddrFrom16(m.Addr.Addr).Unmap(), port), nil
}

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h),
// which x/sys/unix does not name.
const ip6tSoOriginalDst = 80
