package providertest

import (
	"github.com/berth-dev/berth/internal/randid"

	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

func pauseTests() []test {
	return []test{
		{name: "PauseResume", fn: testPauseResume},
		{name: "DestroyPaused", fn: testDestroyPaused},
	}
}

// pausedOpTimeout bounds an operation on a paused sandbox: it must fail
// with ErrPaused, not wait for a resume that may never come.
const pausedOpTimeout = 10 * time.Second

func skipUnlessPause(t *testing.T, p provider.Provider) {
	t.Helper()
	if !p.Capabilities().Pause {
		t.Skipf("skipped: provider %q cannot pause sandboxes (Capabilities.Pause is false)", p.Name())
	}
}

func asPauser(t *testing.T, sb provider.Sandbox) provider.Pauser {
	t.Helper()
	pz, ok := sb.(provider.Pauser)
	if !ok {
		t.Fatalf("Capabilities.Pause is true, but the sandbox (%T) does not implement provider.Pauser", sb)
	}
	return pz
}

// counter starts a process that counts in the file c, and survives the
// command that started it.
const counter = `nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /workspace/c; sleep 0.05; done' > /dev/null 2>&1 &`

// waitCounter waits until the counter exceeds above and returns its value.
func waitCounter(t *testing.T, sb provider.Sandbox, above int) int {
	t.Helper()
	var n int
	eventually(t, settleTimeout, "the counter process counts past "+strconv.Itoa(above), func() (bool, string) {
		data, err := readFileErr(t, sb, "c")
		if err != nil {
			return false, err.Error()
		}
		// The file is empty for a moment on each write.
		n, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && n > above, strconv.Quote(string(data))
	})
	return n
}

func testPauseResume(t *testing.T, s *suite) {
	p := s.open(t)
	skipUnlessPause(t, p)
	spec := s.newSpec(t)
	spec.Labels["case"] = randid.Hex(6)
	sb := s.mustCreate(t, p, spec)
	pz := asPauser(t, sb)
	writeFile(t, sb, "before", []byte("intact"), 0o644)
	mustSh(t, sb, counter)
	before := waitCounter(t, sb, 0)

	ctx := timeout(t, opTimeout)
	if err := pz.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatalf("Info of a paused sandbox: %v", err)
	}
	if info.State != provider.StatePaused {
		t.Errorf("Info.State of a paused sandbox = %q, want %q", info.State, provider.StatePaused)
	}

	t.Run("SeenByAnotherProvider", func(t *testing.T) {
		b := s.open(t)
		sbB, err := b.Get(ctx, spec.ID)
		if err != nil {
			t.Fatalf("Get through a second provider: %v", err)
		}
		if info, err := sbB.Info(ctx); err != nil || info.State != provider.StatePaused {
			t.Errorf("Info through a second provider: state %q, err %v; want %q", info.State, err, provider.StatePaused)
		}
		infos, err := b.List(ctx, map[string]string{"case": spec.Labels["case"]})
		if err != nil || len(infos) != 1 || infos[0].State != provider.StatePaused {
			t.Errorf("List of the paused sandbox = %+v, %v; want one sandbox in state %q", infos, err, provider.StatePaused)
		}
	})

	t.Run("OperationsFail", func(t *testing.T) {
		ops := []struct {
			name string
			do   func(ctx context.Context) error
		}{
			{"Exec", func(ctx context.Context) error {
				_, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"echo", "ran while paused"}})
				return err
			}},
			{"ReadFile", func(ctx context.Context) error { return readOp().do(ctx, sb, "before") }},
			{"WriteFile", func(ctx context.Context) error { return writeOp().do(ctx, sb, "during") }},
			{"ListDir", func(ctx context.Context) error { return listOp().do(ctx, sb, ".") }},
			{"Remove", func(ctx context.Context) error { return removeOp().do(ctx, sb, "before") }},
			{"Export", func(ctx context.Context) error {
				rc, err := sb.Export(ctx)
				if err == nil {
					rc.Close()
				}
				return err
			}},
		}
		for _, op := range ops {
			ctx, cancel := context.WithTimeout(t.Context(), pausedOpTimeout)
			err := op.do(ctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s on a paused sandbox blocked for %v instead of failing with ErrPaused", op.name, pausedOpTimeout)
				continue
			}
			checkErrIs(t, err, errdefs.ErrSandboxPaused, op.name+" on a paused sandbox")
		}
	})

	if err := pz.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if info, err := sb.Info(ctx); err != nil || info.State != provider.StateRunning {
		t.Errorf("Info after Resume: state %q, err %v; want %q", info.State, err, provider.StateRunning)
	}
	// The same process carries on counting from where it was.
	resumed := waitCounter(t, sb, 0)
	if resumed < before {
		t.Errorf("the counter went back from %d to %d: the process did not survive the pause", before, resumed)
	}
	waitCounter(t, sb, resumed)
	if got, err := readFileErr(t, sb, "before"); err != nil || string(got) != "intact" {
		t.Errorf("after Resume, a file written before Pause reads %q, %v", got, err)
	}
	checkServing(t, sb)
}

func testDestroyPaused(t *testing.T, s *suite) {
	p := s.open(t)
	skipUnlessPause(t, p)
	sb := s.mustCreate(t, p, s.newSpec(t))
	ctx := timeout(t, opTimeout)
	if err := asPauser(t, sb).Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("Destroy of a paused sandbox: %v", err)
	}
	_, err := p.Get(ctx, sb.ID())
	checkErrIs(t, err, errdefs.ErrNotFound, "Get after destroying a paused sandbox")
}
