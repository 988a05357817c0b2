package activities

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// served is a provider that serves nothing: ProviderStatuses asks only
// its name and capabilities.
type served struct{ name string }

func (p served) Name() string                        { return p.name }
func (p served) Capabilities() provider.Capabilities { return provider.Capabilities{Pause: true} }
func (p served) Create(context.Context, provider.Spec) (provider.Sandbox, error) {
	return nil, errdefs.ErrUnsupported
}
func (p served) Get(context.Context, string) (provider.Sandbox, error) {
	return nil, errdefs.ErrNotFound
}
func (p served) List(context.Context, map[string]string) ([]provider.Info, error) { return nil, nil }

// checked is a provider over a service whose check does what check does.
type checked struct {
	served
	check func(context.Context) error
}

func (p checked) Check(ctx context.Context) error { return p.check(ctx) }

// TestProviderStatuses: a provider over a service is shown with how its
// check failed (a key refused, the service out of reach, too slow to
// answer, its error's first line), one that answers and one with no
// service as they are; the checks run at once, each bounded by
// checkTimeout, so that two which never answer, one of them deaf to its
// context, hold the answer checkTimeout, not twice that nor forever.
func TestProviderStatuses(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	with := func(name string, check func(context.Context) error) provider.Provider {
		return checked{served{name}, check}
	}
	acts := &Activities{
		HostQueue: "berth@h",
		Providers: map[string]provider.Provider{
			"linux": served{"linux"},
			"ok":    with("ok", func(ctx context.Context) error { return nil }),
			"refused": with("refused", func(context.Context) error {
				return fmt.Errorf("svc: list: 401 Unauthorized: %w", errdefs.ErrProviderAuth)
			}),
			"down": with("down", func(context.Context) error {
				return fmt.Errorf("svc: list: connection refused\nand more: %w", errdefs.ErrProviderUnavailable)
			}),
			"slow": with("slow", func(ctx context.Context) error { <-ctx.Done(); return fmt.Errorf("svc: list: %w", ctx.Err()) }),
			"deaf": with("deaf", func(context.Context) error { <-stuck; return nil }),
		},
		Unavailable: []provider.Availability{{Name: "nokey", Reason: "no API key in $NOKEY"}},
	}
	env := newEnv(acts)
	start := time.Now()
	v, err := env.ExecuteActivity(acts.ProviderStatuses)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var got []provider.Availability
	if err := v.Get(&got); err != nil {
		t.Fatal(err)
	}
	if took < checkTimeout || took > checkTimeout+3*time.Second {
		t.Errorf("ProviderStatuses took %v; want checkTimeout (%v), the checks bounded and at once", took, checkTimeout)
	}

	late := fmt.Sprintf("the service did not answer within %v", checkTimeout)
	want := []struct {
		name, serviceError string
		kind               errdefs.Kind
		available          bool
	}{
		{"deaf", late, errdefs.ProviderUnavailable, true},
		{"down", "svc: list: connection refused", errdefs.ProviderUnavailable, true},
		{"linux", "", "", true},
		{"ok", "", "", true},
		{"refused", "svc: list: 401 Unauthorized: provider refused the key", errdefs.ProviderAuth, true},
		{"slow", late, errdefs.ProviderUnavailable, true},
		{"nokey", "", "", false},
	}
	if len(got) != len(want) {
		t.Fatalf("ProviderStatuses: %+v, want %d providers", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || g.ServiceError != w.serviceError || g.ServiceKind != w.kind || g.Available != w.available || g.Host != "berth@h" {
			t.Errorf("provider %d: %+v; want %s, service error %q of kind %q, available %v, host berth@h", i, g, w.name, w.serviceError, w.kind, w.available)
		}
		if w.available && (g.Capabilities == nil || !g.Capabilities.Pause) {
			t.Errorf("provider %s: capabilities %+v, want its own", g.Name, g.Capabilities)
		}
		if strings.Contains(g.ServiceError, "\n") {
			t.Errorf("provider %s: service error %q is more than a line", g.Name, g.ServiceError)
		}
	}
	if got[6].Reason != "no API key in $NOKEY" {
		t.Errorf("a provider not opened: %+v, want its reason", got[6])
	}
}
