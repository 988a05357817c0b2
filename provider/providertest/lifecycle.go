package providertest

import (
	"github.com/berth-dev/berth/internal/randid"

	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

func lifecycleTests() []test {
	return []test{
		{name: "ZeroSpec", fn: testZeroSpec},
		{name: "Info", fn: testInfo},
		{name: "Idempotent", fn: testIdempotent},
		{name: "ConcurrentCreate", fn: testConcurrentCreate},
		{name: "GetUnknown", fn: testGetUnknown},
		{name: "List", fn: testList},
		{name: "Destroy", fn: testDestroy},
		{name: "BadSpec", fn: testBadSpec},
		{name: "Reconnect", fn: testReconnect},
		{name: "Lifetime", fn: testLifetime},
	}
}

// clockSlack is how far the provider's clock, and the moments it picks for
// CreatedAt and ExpiresAt, may stray from the test's.
const clockSlack = time.Minute

func testZeroSpec(t *testing.T, s *suite) {
	ctx := timeout(t, opTimeout)
	p := s.open(t)
	sb := s.mustCreate(t, p, provider.Spec{})
	if err := provider.ValidateID(sb.ID()); err != nil {
		t.Errorf("a sandbox created without an id got the id %q, which is not valid: %v", sb.ID(), err)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.State != provider.StateRunning {
		t.Errorf("Info.State = %q, want %q: a sandbox is created running", info.State, provider.StateRunning)
	}
	checkServing(t, sb)
}

func testInfo(t *testing.T, s *suite) {
	ctx := timeout(t, opTimeout)
	tests := []struct {
		name     string
		lifetime time.Duration
		want     time.Duration
	}{
		{"DefaultLifetime", 0, provider.DefaultLifetime},
		{"SpecLifetime", 90 * time.Minute, 90 * time.Minute},
	}
	p := s.open(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := s.newSpec(t)
			spec.Labels["purpose"] = "info test"
			spec.Labels["berth.dev/owner"] = "workflow-" + randid.Hex(4)
			spec.Lifetime = tt.lifetime
			before := time.Now()
			sb := s.mustCreate(t, p, spec)
			after := time.Now()
			if sb.ID() != spec.ID {
				t.Errorf("Sandbox.ID() = %q, want the spec's id %q", sb.ID(), spec.ID)
			}
			info, err := sb.Info(ctx)
			if err != nil {
				t.Fatalf("Info: %v", err)
			}
			if info.ID != spec.ID {
				t.Errorf("Info.ID = %q, want %q", info.ID, spec.ID)
			}
			if info.Provider != p.Name() {
				t.Errorf("Info.Provider = %q, want the provider's Name() %q", info.Provider, p.Name())
			}
			if info.State != provider.StateRunning {
				t.Errorf("Info.State = %q, want %q", info.State, provider.StateRunning)
			}
			for k, v := range spec.Labels {
				if got, ok := info.Labels[k]; !ok || got != v {
					t.Errorf("Info.Labels[%q] = %q (present: %v), want %q", k, got, ok, v)
				}
			}
			if info.CreatedAt.Before(before.Add(-clockSlack)) || info.CreatedAt.After(after.Add(clockSlack)) {
				t.Errorf("Info.CreatedAt = %v, want between %v and %v", info.CreatedAt, before, after)
			}
			if got := info.ExpiresAt.Sub(info.CreatedAt); got < tt.want-clockSlack || got > tt.want+clockSlack {
				t.Errorf("Info.ExpiresAt - Info.CreatedAt = %v, want about %v (Spec.Lifetime %v)", got, tt.want, tt.lifetime)
			}
		})
	}
}

func testIdempotent(t *testing.T, s *suite) {
	ctx := timeout(t, opTimeout)
	p := s.open(t)
	spec := s.newSpec(t)
	spec.Labels["case"] = randid.Hex(6)
	first := s.mustCreate(t, p, spec)
	writeFile(t, first, "marker", []byte("first"), 0o644)

	second := s.mustCreate(t, p, spec)
	if second.ID() != first.ID() {
		t.Fatalf("creating id %q twice gave two ids, %q and %q", spec.ID, first.ID(), second.ID())
	}
	if got := readFile(t, second, "marker"); string(got) != "first" {
		t.Errorf("the second Create did not return the existing sandbox: marker reads %q, want %q", got, "first")
	}
	infos, err := p.List(ctx, map[string]string{"case": spec.Labels["case"]})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 1 {
		t.Errorf("after creating id %q twice, List finds %d sandboxes, want 1: %v", spec.ID, len(infos), ids(infos))
	}
}

// testConcurrentCreate is a retry racing the first attempt, as happens when
// a worker dies mid-Create and its activity is retried elsewhere.
func testConcurrentCreate(t *testing.T, s *suite) {
	ctx := timeout(t, opTimeout)
	p := s.open(t)
	spec := s.adjust(s.newSpec(t))
	spec.Labels["case"] = randid.Hex(6)
	const n = 3
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		got   []string
		start = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
			defer cancel()
			sb, err := p.Create(ctx, spec)
			if err != nil {
				t.Errorf("concurrent Create(%q): %v", spec.ID, err)
				return
			}
			destroyOnCleanup(t, sb)
			mu.Lock()
			got = append(got, sb.ID())
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	for _, id := range got {
		if id != spec.ID {
			t.Errorf("concurrent Create(%q) returned a sandbox with id %q", spec.ID, id)
		}
	}
	infos, err := p.List(ctx, map[string]string{"case": spec.Labels["case"]})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 1 {
		t.Errorf("after %d concurrent Creates of one id, List finds %d sandboxes, want 1: %v", n, len(infos), ids(infos))
	}
}

func testGetUnknown(t *testing.T, s *suite) {
	ctx := timeout(t, opTimeout)
	p := s.open(t)
	_, err := p.Get(ctx, "pt-no-such-sandbox-"+randid.Hex(6))
	checkErrIs(t, err, errdefs.ErrNotFound, "Get of an unknown id")

	// An id that could never exist may be reported either way, but never
	// as found, and never by touching the path it spells.
	for _, id := range []string{"../x", "a/b", ""} {
		_, err := p.Get(ctx, id)
		if !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("Get(%q): got %v, want an error wrapping ErrNotFound or ErrBadInput", id, err)
		}
	}
}

func testList(t *testing.T, s *suite) {
	ctx := timeout(t, opTimeout)
	p := s.open(t)
	team := "team-" + randid.Hex(6)
	mk := func(labels map[string]string) string {
		spec := s.newSpec(t)
		maps.Copy(spec.Labels, labels)
		return s.mustCreate(t, p, spec).ID()
	}
	a := mk(map[string]string{"team": team, "role": "a"})
	b := mk(map[string]string{"team": team, "role": "b"})
	other := mk(map[string]string{"elsewhere": team})

	tests := []struct {
		name   string
		filter map[string]string
		want   []string
	}{
		{"OneLabel", map[string]string{"team": team}, []string{a, b}},
		{"AllLabelsMustMatch", map[string]string{"team": team, "role": "a"}, []string{a}},
		{"NoMatch", map[string]string{"team": team, "role": "c"}, nil},
		{"ValueMustMatch", map[string]string{"team": team + "-x"}, nil},
		{"OtherKey", map[string]string{"elsewhere": team}, []string{other}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			infos, err := p.List(ctx, tt.filter)
			if err != nil {
				t.Fatalf("List(%v): %v", tt.filter, err)
			}
			got := ids(infos)
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("List(%v) = %v, want %v", tt.filter, got, want)
			}
			for _, info := range infos {
				for k, v := range tt.filter {
					if info.Labels[k] != v {
						t.Errorf("List(%v) returned %s whose Info.Labels[%q] = %q", tt.filter, info.ID, k, info.Labels[k])
					}
				}
			}
		})
	}
	t.Run("EmptyFilter", func(t *testing.T) {
		for _, filter := range []map[string]string{nil, {}} {
			infos, err := p.List(ctx, filter)
			if err != nil {
				t.Fatalf("List(%#v): %v", filter, err)
			}
			got := ids(infos)
			for _, id := range []string{a, b, other} {
				if !slices.Contains(got, id) {
					t.Errorf("List(%#v) should list every sandbox, but misses %s", filter, id)
				}
			}
		}
	})
}

func testDestroy(t *testing.T, s *suite) {
	ctx := timeout(t, opTimeout)
	p := s.open(t)
	spec := s.newSpec(t)
	spec.Labels["case"] = randid.Hex(6)
	sb := s.mustCreate(t, p, spec)
	writeFile(t, sb, "old", []byte("from before Destroy"), 0o644)

	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	_, err := p.Get(ctx, spec.ID)
	checkErrIs(t, err, errdefs.ErrNotFound, "Get after Destroy")
	infos, err := p.List(ctx, map[string]string{"case": spec.Labels["case"]})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 0 {
		t.Errorf("List still finds the destroyed sandbox: %v", ids(infos))
	}
	_, err = sb.Info(ctx)
	checkErrIs(t, err, errdefs.ErrNotFound, "Info on a handle whose sandbox was destroyed")
	_, err = sb.Exec(ctx, provider.ExecRequest{Argv: []string{"true"}})
	checkErrIs(t, err, errdefs.ErrNotFound, "Exec on a handle whose sandbox was destroyed")
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: got %v, want nil: Destroy is idempotent", err)
	}

	// The id is free again, and what the old sandbox held is gone.
	again := s.mustCreate(t, p, spec)
	if _, err := readFileErr(t, again, "old"); err == nil {
		t.Errorf("a sandbox re-created with a destroyed sandbox's id still has its files")
	}
}

func testBadSpec(t *testing.T, s *suite) {
	ctx := timeout(t, opTimeout)
	manyLabels := map[string]string{}
	for i := range provider.MaxLabels + 1 {
		manyLabels[fmt.Sprintf("label-%d", i)] = "v"
	}
	tests := []struct {
		name   string
		modify func(*provider.Spec)
	}{
		{"IDDotDot", func(sp *provider.Spec) { sp.ID = "../x" }},
		{"IDSlash", func(sp *provider.Spec) { sp.ID = "a/b" }},
		{"IDTooLong", func(sp *provider.Spec) { sp.ID = "a" + strings.Repeat("b", provider.MaxIDLen) }},
		{"IDLeadingDash", func(sp *provider.Spec) { sp.ID = "-x" }},
		{"IDLeadingDot", func(sp *provider.Spec) { sp.ID = ".x" }},
		{"IDSpace", func(sp *provider.Spec) { sp.ID = "a b" }},
		{"LabelKeyWithEquals", func(sp *provider.Spec) { sp.Labels["a=b"] = "v" }},
		{"LabelKeyEmpty", func(sp *provider.Spec) { sp.Labels[""] = "v" }},
		{"TooManyLabels", func(sp *provider.Spec) { sp.Labels = manyLabels }},
		{"LabelValueControlChar", func(sp *provider.Spec) { sp.Labels["k"] = "a\nb" }},
		{"LabelValueTooLong", func(sp *provider.Spec) { sp.Labels["k"] = strings.Repeat("v", provider.MaxLabelValueLen+1) }},
		{"NegativeCPU", func(sp *provider.Spec) { sp.Resources.CPU = -1 }},
		{"NegativeMemory", func(sp *provider.Spec) { sp.Resources.Memory = -1 }},
		{"NegativePids", func(sp *provider.Spec) { sp.Resources.Pids = -1 }},
		{"NegativeDisk", func(sp *provider.Spec) { sp.Resources.Disk = -1 }},
		{"NegativeLifetime", func(sp *provider.Spec) { sp.Lifetime = -time.Second }},
		{"UnknownNetwork", func(sp *provider.Spec) { sp.Network.Mode = "bogus" }},
		{"NetworkRulesWithoutAllow", func(sp *provider.Spec) {
			sp.Network = provider.Network{Mode: provider.NetworkOpen, Hosts: []string{"pypi.org"}}
		}},
		{"NetworkBadHost", func(sp *provider.Spec) {
			sp.Network = provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"evil example"}}
		}},
		{"EnvNameWithEquals", func(sp *provider.Spec) { sp.Env = map[string]string{"A=B": "x"} }},
		{"EnvNameEmpty", func(sp *provider.Spec) { sp.Env = map[string]string{"": "x"} }},
		{"EnvValueNUL", func(sp *provider.Spec) { sp.Env = map[string]string{"A": "x\x00y"} }},
		{"DirOutsideWorkspace", func(sp *provider.Spec) { sp.Dir = "../x" }},
		{"DirAbsoluteOutside", func(sp *provider.Spec) { sp.Dir = "/etc" }},
	}
	p := s.open(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := s.adjust(s.newSpec(t))
			tt.modify(&spec)
			sb, err := p.Create(ctx, spec)
			if err == nil {
				destroyOnCleanup(t, sb)
			}
			checkErrIs(t, err, errdefs.ErrBadInput, "Create with a bad spec")
		})
	}
}

// testReconnect is what happens after a worker restarts: a new provider
// value, in a new process, finds the sandbox by id and carries on.
func testReconnect(t *testing.T, s *suite) {
	ctx := timeout(t, opTimeout)
	a := s.open(t)
	spec := s.newSpec(t)
	spec.Labels["case"] = randid.Hex(6)
	sbA := s.mustCreate(t, a, spec)
	writeFile(t, sbA, "from-api", []byte("written through A"), 0o644)
	mustSh(t, sbA, "echo made by a command through A > from-cmd")
	first, err := execute(t, sbA, provider.ExecRequest{ID: "reconnect-1", Shell: "echo ran >> once.log; echo out"})
	if err != nil {
		t.Fatalf("Exec through A: %v", err)
	}

	b := s.open(t)
	sbB, err := b.Get(ctx, spec.ID)
	if err != nil {
		t.Fatalf("Get(%q) through a second provider: %v", spec.ID, err)
	}
	if sbB.ID() != spec.ID {
		t.Errorf("Get(%q).ID() = %q", spec.ID, sbB.ID())
	}
	info, err := sbB.Info(ctx)
	if err != nil {
		t.Fatalf("Info through B: %v", err)
	}
	if info.State != provider.StateRunning || info.Labels["case"] != spec.Labels["case"] {
		t.Errorf("Info through B = state %q, labels %v; want running with case=%s", info.State, info.Labels, spec.Labels["case"])
	}
	checkServing(t, sbB)
	if got := readFile(t, sbB, "from-api"); string(got) != "written through A" {
		t.Errorf("ReadFile through B of a file written through A = %q", got)
	}
	if got := readFile(t, sbB, "from-cmd"); string(got) != "made by a command through A\n" {
		t.Errorf("ReadFile through B of a file a command made through A = %q", got)
	}

	again, err := execute(t, sbB, provider.ExecRequest{ID: "reconnect-1", Shell: "echo ran >> once.log; echo out"})
	if err != nil {
		t.Fatalf("re-Exec of request %q through B: %v", "reconnect-1", err)
	}
	checkAttached(t, "re-Exec through B of a request A ran", again, first)
	if got := readFile(t, sbB, "once.log"); string(got) != "ran\n" {
		t.Errorf("the command ran more than once across providers: once.log = %q", got)
	}

	infos, err := b.List(ctx, map[string]string{"case": spec.Labels["case"]})
	if err != nil {
		t.Fatalf("List through B: %v", err)
	}
	if !slices.Equal(ids(infos), []string{spec.ID}) {
		t.Errorf("List through B = %v, want [%s]", ids(infos), spec.ID)
	}
	sbB2 := s.mustCreate(t, b, spec)
	if got := readFile(t, sbB2, "from-api"); string(got) != "written through A" {
		t.Errorf("Create through B of an id A created did not return A's sandbox: from-api = %q", got)
	}
}

// testLifetime checks the last-resort limit: when a sandbox's lifetime has
// passed, the provider stops it whatever it is doing.
func testLifetime(t *testing.T, s *suite) {
	p := s.open(t)
	sb := s.createShortLived(t, p, 3*time.Second)

	running := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
		defer cancel()
		_, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"sleep", "600"}})
		running <- err
	}()

	eventually(t, 2*time.Minute, "the sandbox is stopped once its lifetime has passed", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), settleTimeout)
		defer cancel()
		info, err := sb.Info(ctx)
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			return true, "gone"
		case err != nil:
			return false, "Info: " + err.Error()
		case info.State == provider.StateLost:
			return true, "lost"
		}
		_, err = sb.Exec(ctx, provider.ExecRequest{Argv: []string{"true"}})
		if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrSandboxLost) {
			return true, err.Error()
		}
		return false, "state " + string(info.State) + ", and it still runs commands"
	})
	select {
	case err := <-running:
		t.Logf("a command running when the lifetime passed ended with: %v", err)
	case <-time.After(settleTimeout):
		t.Errorf("a command running when the sandbox's lifetime passed was still running %v later", settleTimeout)
	}
}

func ids(infos []provider.Info) []string {
	out := make([]string, 0, len(infos))
	for _, info := range infos {
		out = append(out, info.ID)
	}
	return out
}
