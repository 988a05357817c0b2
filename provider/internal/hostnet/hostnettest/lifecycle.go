package hostnettest

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
)

// testDestroyAndKill checks that Destroy leaves nothing of a sandbox's
// network; that a sandbox killed from outside loses its veth with its
// namespace, keeps its table and slot until the next sweep removes
// them, and is then destroyed without complaint; and that a provider
// opened after a crash sweeps as it opens.
func testDestroyAndKill(t *testing.T, h Harness) {
	e := h.open(t, -1, nil, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	a := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-destroyed", Network: policy})
	b := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-killed", Network: policy})
	c := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-none"})
	e.left(t, "net-none")
	e.kept(t, "net-killed")
	if err := a.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-destroyed")
	e.kill(t, b)
	left, err := e.P.Net().Leftovers("net-killed")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 3 {
		t.Errorf("a killed sandbox's network holds %q, want its table, record and slot alone", left)
	}
	if err := e.P.(interface{ SweepNetworks(context.Context) error }).SweepNetworks(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-killed")
	if err := b.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	d := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-crashed", Network: policy})
	e.kill(t, d)
	n := e.config()
	h.Open(t, Config{Pool: -1, Network: n, StateDir: e.P.StateDir()})
	e.left(t, "net-crashed")
	// The sandbox of none was left alone.
	sandboxtest.Sh(t, c, "true")
}

// config is the network configuration e's provider was opened with.
func (e *Env) config() hostnet.NetworkConfig { return e.n }

// kill kills sb and waits until its namespace's veth is gone.
func (e *Env) kill(t *testing.T, sb provider.Sandbox) {
	t.Helper()
	e.h.Kill(t, e.P, sb)
	testkit.Eventually(t, "veth gone", 10*time.Second, func() bool {
		left, _ := e.P.Net().Leftovers(sb.ID())
		return !strings.Contains(strings.Join(left, " "), "veth")
	})
}

// left fails the test if anything of id's network is left.
func (e *Env) left(t *testing.T, id string) {
	t.Helper()
	left, err := e.P.Net().Leftovers(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left of %s's network: %s", id, strings.Join(left, ", "))
	}
}

// kept fails the test unless id's network is whole: veth, table,
// record, slot.
func (e *Env) kept(t *testing.T, id string) {
	t.Helper()
	left, err := e.P.Net().Leftovers(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 4 {
		t.Errorf("%s's network holds %q, want its veth, table, record and slot", id, left)
	}
}

// testPoolFull fills the address pool: the next sandbox of a network
// is refused (ErrQuota) and nothing of it is left; a sandbox of none is
// still made, and once a slot is free a network sandbox is again.
func testPoolFull(t *testing.T, h Harness) {
	e := h.open(t, -1, func(n *hostnet.NetworkConfig) {
		n.Pool = netip.MustParsePrefix("100.96.0.0/28") // the smallest: three slots
	}, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	var a provider.Sandbox
	for i := range 3 {
		a = sandboxtest.Create(t, e.P, provider.Spec{ID: "first" + strconv.Itoa(i), Network: policy})
	}
	_, err := e.P.Create(t.Context(), provider.Spec{ID: "second", Network: policy})
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("a sandbox past the pool: %v, want quota", err)
	}
	e.left(t, "second")
	if _, err := e.P.Get(t.Context(), "second"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a sandbox whose network failed exists: %v", err)
	}
	if h.Residue != nil {
		if n := h.Residue(t, e.P); n != 3 {
			t.Errorf("containers left: %d, want the first sandboxes' alone", n)
		}
	}
	sandboxtest.Create(t, e.P, provider.Spec{ID: "closed"})
	if err := a.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Create(t, e.P, provider.Spec{ID: "second", Network: policy})
}

// reachProbe says whether pypi.org's address answers on port 80.
const reachProbe = `/usr/bin/python3 -c '
import socket
try:
    socket.create_connection(("203.0.113.10", 80), timeout=2).close()
    print("reached")
except OSError as e:
    print("unreached", type(e).__name__)
'`

// testUpdate changes running sandboxes' networks: one of a network has
// it taken away, which it survives, and an allow list of nothing is
// refused; one started without a network (from a warm daemon) is given
// one and has it taken away again, or, where the provider cannot
// (Harness.AttachLater), is refused and left as it was.
func testUpdate(t *testing.T, h Harness) {
	e := h.open(t, 1, nil, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	sb := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-update", Network: policy})
	if out := sandboxtest.Sh(t, sb, reachProbe); !strings.Contains(out, "reached") || strings.Contains(out, "unreached") {
		t.Fatalf("a sandbox whose allow list names the host: %q", out)
	}
	u := sb.(provider.NetworkUpdater)
	if err := u.UpdateNetwork(t.Context(), provider.Network{}); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-update")
	if out := sandboxtest.Sh(t, sb, reachProbe); !strings.Contains(out, "unreached") {
		t.Errorf("a sandbox whose network UpdateNetwork took away: %q", out)
	}
	// The veth goes with its link (gVisor's netstack keeps its own
	// interface, dead, for it takes interfaces only as it starts).
	if out := python(t, sb, "import socket; print(*sorted(n for _, n in socket.if_nameindex()))"); h.AttachLater && strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces once the network is taken away: %q", out)
	}
	if err := u.UpdateNetwork(t.Context(), provider.Network{Mode: provider.NetworkAllow}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("UpdateNetwork with an allow list of nothing: %v, want bad input", err)
	}
	// Given back: attached again, or refused and left as it was.
	err := u.UpdateNetwork(t.Context(), policy)
	switch {
	case h.AttachLater && err != nil:
		t.Errorf("UpdateNetwork giving back a network: %v", err)
	case h.AttachLater:
		if out := sandboxtest.Sh(t, sb, reachProbe); !strings.Contains(out, "reached") || strings.Contains(out, "unreached") {
			t.Errorf("a sandbox given back its network: %q", out)
		}
		if err := u.UpdateNetwork(t.Context(), provider.Network{}); err != nil {
			t.Fatal(err)
		}
	case !errors.Is(err, errdefs.ErrUnsupported):
		t.Errorf("UpdateNetwork giving back a network: %v, want unsupported", err)
	}
	e.left(t, "net-update")
	sandboxtest.Sh(t, sb, "true")

	sandboxtest.Create(t, e.P, provider.Spec{ID: "fill"}) // the warm pool fills from a creation
	later := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-later"})
	lu := later.(provider.NetworkUpdater)
	if out := sandboxtest.Sh(t, later, reachProbe); !strings.Contains(out, "unreached") {
		t.Fatalf("a sandbox without a network: %q", out)
	}
	err = lu.UpdateNetwork(t.Context(), policy)
	if !h.AttachLater {
		if !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("UpdateNetwork giving a network to a sandbox started without: %v, want unsupported", err)
		}
		e.left(t, "net-later")
		if err := lu.UpdateNetwork(t.Context(), provider.Network{}); err != nil {
			t.Errorf("UpdateNetwork to none on a sandbox of none: %v", err)
		}
		sandboxtest.Sh(t, later, "true")
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if out := sandboxtest.Sh(t, later, reachProbe); !strings.Contains(out, "reached") || strings.Contains(out, "unreached") {
		t.Errorf("a sandbox given a network by UpdateNetwork: %q", out)
	}
	if err := lu.UpdateNetwork(t.Context(), provider.Network{}); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-later")
	if out := sandboxtest.Sh(t, later, reachProbe); !strings.Contains(out, "unreached") {
		t.Errorf("a sandbox whose network UpdateNetwork took away: %q", out)
	}
}
