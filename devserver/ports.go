package devserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// ports are the TCP ports the server listens on. With static membership
// (no ringpop) there is no membership port, and metrics and pprof are left
// off, so these five are all.
type ports struct {
	frontendHost string // IP the frontend binds to, for gRPC and HTTP
	frontend     int
	http         int // the frontend's HTTP API, which Nexus needs
	history      int
	matching     int
	worker       int
}

// dialHost is the address clients (and the server's own services) use to
// reach the frontend: a wildcard bind is reached through loopback.
func (p ports) dialHost() string {
	if ip := net.ParseIP(p.frontendHost); ip != nil && ip.IsUnspecified() {
		return internalHost
	}
	return p.frontendHost
}

func (p ports) frontendAddress() string {
	return net.JoinHostPort(p.dialHost(), strconv.Itoa(p.frontend))
}

func (p ports) httpAddress() string {
	return net.JoinHostPort(p.dialHost(), strconv.Itoa(p.http))
}

func internalAddress(port int) string {
	return net.JoinHostPort(internalHost, strconv.Itoa(port))
}

// parseAddress splits Options.Address. The server binds an IP, never a name.
func parseAddress(address string) (host string, port int, err error) {
	if address == "" {
		address = defaultAddress
	}
	h, ps, err := net.SplitHostPort(address)
	if err != nil {
		return "", 0, fmt.Errorf("devserver: Options.Address %q: want host:port: %w", address, err)
	}
	port, err = strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("devserver: Options.Address %q: bad port", address)
	}
	switch {
	case h == "" || h == "localhost":
		h = internalHost
	case net.ParseIP(h) == nil:
		return "", 0, fmt.Errorf("devserver: Options.Address %q: host must be an IP address or localhost", address)
	}
	return h, port, nil
}

// choosePorts settles every port before the server starts: with static
// membership each service must know the others' addresses up front.
func choosePorts(host string, frontend int) (ports, error) {
	p := ports{frontendHost: host, frontend: frontend}
	var err error
	if frontend == 0 {
		if p.frontend, err = freePort(host); err != nil {
			return ports{}, err
		}
	}
	if p.http, err = freePort(host); err != nil {
		return ports{}, err
	}
	for _, port := range []*int{&p.history, &p.matching, &p.worker} {
		if *port, err = freePort(internalHost); err != nil {
			return ports{}, err
		}
	}
	return p, nil
}

// checkFree fails with ErrAddressInUse if addr cannot be bound now. The
// server reports a failed bind from deep inside its startup (through its
// logger's Fatal), after schema setup and more: checking first gives a
// clear error at once.
func checkFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("devserver: %s: %w (is another Temporal server or berth dev running?)", addr, ErrAddressInUse)
		}
		return fmt.Errorf("devserver: cannot listen on %s: %w", addr, err)
	}
	return l.Close()
}

// freePort returns a port on host that nothing listens on. Linux hands out
// ephemeral ports in random order and may give the same one to the next
// bind(0), for example to a second test server starting in parallel; a
// connection closed from the accepting side parks the port in TIME_WAIT,
// which keeps bind(0) away from it for a minute while an explicit bind
// (with SO_REUSEADDR, which Go sets) still succeeds.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("devserver: find a free port on %s: %w", host, err)
	}
	defer l.Close()
	addr := l.Addr().(*net.TCPAddr)

	dialer := net.Dialer{Timeout: time.Second}
	conn, err := dialer.Dial("tcp", net.JoinHostPort(dialableHost(addr.IP), strconv.Itoa(addr.Port)))
	if err != nil {
		return addr.Port, nil // the reservation is an optimization only
	}
	defer conn.Close()
	if accepted, err := l.Accept(); err == nil {
		_ = accepted.Close() // server side first: that end enters TIME_WAIT
	}
	return addr.Port, nil
}

func dialableHost(ip net.IP) string {
	if ip.IsUnspecified() {
		return internalHost
	}
	return ip.String()
}
