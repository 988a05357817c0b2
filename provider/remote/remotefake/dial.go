package remotefake

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/errdefs"
)

// Dial connects to 127.0.0.1:port in the machine's own network
// namespace. The socket is made by a thread that has entered the
// namespace, so it stays in it whatever thread serves it later.
func (m *Machine) Dial(ctx context.Context, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("%w: remotefake: port %d", errdefs.ErrBadInput, port)
	}
	ns, err := m.openProc("ns/net", unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		c, err := dialIn(ctx, ns, port)
		unix.Close(ns)
		ch <- result{c, err}
		// The thread stays locked: it ends with the goroutine, and no
		// other goroutine runs in the machine's namespace.
	}()
	r := <-ch
	if r.err != nil {
		return nil, fmt.Errorf("remotefake: dial port %d of machine %q: %w", port, m.id, r.err)
	}
	return r.c, nil
}

// dialIn dials on a locked thread that it moves into the namespace ns.
func dialIn(ctx context.Context, ns, port int) (net.Conn, error) {
	if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter the network namespace: %w", err)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}
