package clients

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/sandboxd"
)

// daemon serves a real sandboxd server on a unix socket, and makes
// clients of it that count their connections open.
type daemon struct {
	sock string
	open atomic.Int64
}

func serve(t *testing.T) *daemon {
	t.Helper()
	dir := t.TempDir()
	srv, err := sandboxd.New(sandboxd.Config{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{sock: filepath.Join(dir, "d.sock")}
	ln, err := net.Listen("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { ln.Close(); <-served })
	return d
}

type countedConn struct {
	net.Conn
	once sync.Once
	open *atomic.Int64
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

func (d *daemon) client() *sandboxd.Client {
	return sandboxd.NewClient(func(ctx context.Context) (net.Conn, error) {
		var dl net.Dialer
		conn, err := dl.DialContext(ctx, "unix", d.sock)
		if err != nil {
			return nil, err
		}
		d.open.Add(1)
		return &countedConn{Conn: conn, open: &d.open}, nil
	})
}

// use makes a request, leaving an idle connection in cl.
func use(t *testing.T, cl *sandboxd.Client) {
	t.Helper()
	if err := cl.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestGetSharesOneClient(t *testing.T) {
	var c Cache
	d := serve(t)
	var dials atomic.Int64
	dial := func() *sandboxd.Client { dials.Add(1); return d.client() }

	const handles = 16
	got := make([]*sandboxd.Client, handles)
	var wg sync.WaitGroup
	for i := range handles {
		wg.Go(func() { got[i] = c.Get("sb-1", dial) })
	}
	wg.Wait()
	if n := dials.Load(); n != 1 {
		t.Errorf("%d handles dialled %d clients, want 1", handles, n)
	}
	for i, cl := range got {
		if cl != got[0] {
			t.Fatalf("handle %d got another client", i)
		}
	}
	if other := c.Get("sb-2", dial); other == got[0] {
		t.Error("another sandbox got the same client")
	}
	c.Close()
}

func TestForgetAdoptCloseCloseConnections(t *testing.T) {
	tests := []struct {
		name string
		drop func(c *Cache, d *daemon)
	}{
		{"forget", func(c *Cache, _ *daemon) { c.Forget("sb-1") }},
		{"adopt a new one", func(c *Cache, d *daemon) { c.Adopt("sb-1", d.client()) }},
		{"close", func(c *Cache, _ *daemon) { c.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Cache
			d := serve(t)
			use(t, c.Get("sb-1", d.client))
			use(t, c.Get("sb-2", d.client))
			if n := d.open.Load(); n != 2 {
				t.Fatalf("%d connections open, want 2", n)
			}
			tt.drop(&c, d)
			want := int64(1) // sb-2's
			if tt.name == "close" {
				want = 0
			}
			if n := d.open.Load(); n != want {
				t.Errorf("%d connections open after %s, want %d", n, tt.name, want)
			}
			if tt.name == "forget" || tt.name == "close" {
				fresh := false
				c.Get("sb-1", func() *sandboxd.Client { fresh = true; return d.client() })
				if !fresh {
					t.Error("Get after the client was dropped returned the old one")
				}
			}
			c.Close()
		})
	}
}

func TestZeroCacheIsReady(t *testing.T) {
	var c Cache
	c.Forget("sb-1")
	c.Close()
	d := serve(t)
	c.Adopt("sb-1", d.client())
	if c.Get("sb-1", func() *sandboxd.Client { t.Error("dialled though adopted"); return nil }) == nil {
		t.Error("no client after Adopt")
	}
	c.Close()
}
