package berth_test

import (
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/errdefs"
)

// TestCreateHostTimeout: the host timeout given to Create reaches the
// sandbox's workflow (its status reads it back), and one out of bounds
// fails at once as one line of bad input, starting nothing. The cluster
// test (internal/cluster, TestPartition) shows a short one noticing a
// lost host sooner.
func TestCreateHostTimeout(t *testing.T) {
	ctx := t.Context()
	c := berth.New(dial())
	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{HostTimeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Stop(ctx) })
	st, err := sb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Options.HostTimeout != 7*time.Second {
		t.Errorf("the sandbox's host timeout: %v; want 7s", st.Options.HostTimeout)
	}
	for _, d := range []time.Duration{-time.Second, time.Second, berth.MaxHostTimeout + time.Second} {
		id := "sbx-bad-host-timeout"
		_, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{ID: id, HostTimeout: d})
		if berth.KindOf(err) != errdefs.BadInput || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "host timeout") {
			t.Errorf("host timeout %v: %v (kind %s); want one line of bad input naming the host timeout", d, err, berth.KindOf(err))
		}
		if _, err := c.Sandboxes().Get(ctx, id); berth.KindOf(err) != errdefs.NotFound {
			t.Errorf("after a refused create, Get(%s): %v; want not found (nothing started)", id, err)
		}
	}
}
