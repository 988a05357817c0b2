package main

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// TestSandboxCommandLife: a command in a standalone sandbox can be
// interrupted, left and found again, as docker and kubectl users expect:
// Ctrl-C forwards SIGINT, a second Ctrl-C detaches; exec --detach,
// attach (from the start, then live; after the command ended; across
// continue-as-new), kill, inspect's running ids; bad input refused. One
// berth dev serves every subtest.
func TestSandboxCommandLife(t *testing.T) {
	t.Parallel()
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	sb := func(args ...string) (string, string, int) {
		t.Helper()
		return runBerth(t, berth, append([]string{"sandbox", args[0], "--address", addr}, args[1:]...)...)
	}
	start := func(t *testing.T, args ...string) *process {
		t.Helper()
		return startBerth(t, berth, append([]string{"sandbox", args[0], "--address", addr}, args[1:]...)...)
	}
	waitOutput := func(t *testing.T, p *process, want string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(p.stdout.String(), want) {
			select {
			case <-p.exited:
				t.Fatalf("berth exited before printing %q: stdout %q, stderr %q", want, p.stdout.String(), p.stderr.String())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q after a minute: stdout %q, stderr %q", want, p.stdout.String(), p.stderr.String())
			}
		}
	}
	running := func(t *testing.T, id string) []string {
		t.Helper()
		out, errOut, code := sb("inspect", id)
		if code != 0 {
			t.Fatalf("inspect: exit %d, %s", code, errOut)
		}
		for _, l := range strings.Split(out, "\n") {
			if ids, ok := strings.CutPrefix(l, "running:"); ok {
				return strings.Fields(ids)
			}
		}
		t.Fatalf("inspect printed no running line: %q", out)
		return nil
	}

	out, errOut, code := sb("create")
	if code != 0 {
		t.Fatalf("create: exit %d, %s", code, errOut)
	}
	id := strings.TrimSpace(out)

	t.Run("CtrlC", func(t *testing.T) {
		// The command traps SIGINT: its output goes on after the Ctrl-C,
		// and its exit code is its own.
		p := start(t, "exec", id, "--", "sh", "-c", `trap 'echo interrupted; exit 5' INT; echo ready; while :; do sleep 0.1; done`)
		waitOutput(t, p, "ready")
		p.cmd.Process.Signal(syscall.SIGINT)
		if code := p.wait(t, time.Minute); code != 5 || !strings.Contains(p.stdout.String(), "interrupted") {
			t.Errorf("trapping command: exit %d, stdout %q, stderr %q; want 5 and its trap's output", code, p.stdout.String(), p.stderr.String())
		}
		// One that SIGINT ends: 130, as a shell says.
		p = start(t, "exec", id, "--", "sh", "-c", "echo ready; exec sleep 60")
		waitOutput(t, p, "ready")
		p.cmd.Process.Signal(syscall.SIGINT)
		if code := p.wait(t, time.Minute); code != 130 || strings.Contains(p.stderr.String(), "detached") {
			t.Errorf("interrupted command: exit %d, stderr %q; want 130, not detached", code, p.stderr.String())
		}
	})

	detachedRE := regexp.MustCompile(`detached: (\S+) goes on; berth sandbox attach ` + regexp.QuoteMeta(id) + ` (\S+)\n`)
	t.Run("CtrlCTwiceDetaches", func(t *testing.T) {
		p := start(t, "exec", id, "--", "sh", "-c", `trap 'echo ignored' INT; echo ready; while :; do sleep 0.1; done`)
		waitOutput(t, p, "ready")
		p.cmd.Process.Signal(syscall.SIGINT)
		waitOutput(t, p, "ignored") // forwarded, and the output goes on
		p.cmd.Process.Signal(syscall.SIGINT)
		code := p.wait(t, time.Minute)
		m := detachedRE.FindStringSubmatch(p.stderr.String())
		if code != 130 || m == nil || m[1] != m[2] {
			t.Fatalf("second Ctrl-C: exit %d, stderr %q; want 130 and how to attach", code, p.stderr.String())
		}
		cmdID := m[1]
		if ids := running(t, id); len(ids) != 1 || ids[0] != cmdID {
			t.Errorf("inspect lists running %q, want the detached command %s", ids, cmdID)
		}
		a := start(t, "attach", id, cmdID)
		waitOutput(t, a, "ready\nignored\n") // from the start
		if _, errOut, code := sb("kill", id, cmdID); code != 0 {
			t.Fatalf("kill: exit %d, %s", code, errOut)
		}
		if code := a.wait(t, time.Minute); code != 137 {
			t.Errorf("attach to a killed command: exit %d, stderr %q; want 137", code, a.stderr.String())
		}
		if ids := running(t, id); len(ids) != 0 {
			t.Errorf("inspect lists running %q after the kill", ids)
		}
	})

	t.Run("DetachAttachKill", func(t *testing.T) {
		out, errOut, code := sb("exec", "--detach", id, "--", "sh", "-c", "echo start; echo err >&2; exec sleep 60")
		cmdID := strings.TrimSpace(out)
		if code != 0 || !strings.HasPrefix(cmdID, "exec-") {
			t.Fatalf("exec --detach: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		a := start(t, "attach", id, cmdID)
		waitOutput(t, a, "start\n")
		if _, errOut, code := sb("kill", "--signal", "term", id, cmdID); code != 0 {
			t.Fatalf("kill --signal term: exit %d, %s", code, errOut)
		}
		if code := a.wait(t, time.Minute); code != 143 || a.stdout.String() != "start\n" || a.stderr.String() != "err\n" {
			t.Errorf("attach: exit %d, stdout %q, stderr %q; want 143, start, err", code, a.stdout.String(), a.stderr.String())
		}
		// Ended, it is still there to attach to, and not to signal.
		if out, errOut, code := sb("attach", id, cmdID); code != 143 || out != "start\n" || errOut != "err\n" {
			t.Errorf("attach to the ended command: exit %d, stdout %q, stderr %q; want 143, start, err", code, out, errOut)
		}
		if _, errOut, code := sb("kill", id, cmdID); code != exitBerth || !strings.Contains(errOut, "has ended") {
			t.Errorf("kill of an ended command: exit %d, stderr %q; want %d, has ended", code, errOut, exitBerth)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			args []string
			code int
			want string
		}{
			{"UnknownSignal", []string{"kill", "--signal", "STOP", id, "exec-x"}, 2, "want one of"},
			{"KillUnknownCommand", []string{"kill", id, "exec-nope"}, exitBerth, "BadInput"},
			{"AttachUnknownCommand", []string{"attach", id, "exec-nope"}, exitBerth, "no command"},
			{"AttachBadID", []string{"attach", id, "../x"}, exitBerth, "BadInput"},
			{"KillNoSandbox", []string{"kill", "sbx-none", "exec-x"}, exitBerth, "NotFound"},
			{"HostTimeoutTooShort", []string{"create", "--host-timeout", "1s"}, exitBerth, "BadInput"},
			{"HostTimeoutTooLong", []string{"create", "--host-timeout", "25h"}, exitBerth, "host timeout 25h0m0s"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				_, errOut, code := sb(tt.args...)
				if code != tt.code || !strings.Contains(errOut, tt.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
					t.Errorf("berth sandbox %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, errOut, tt.code, tt.want)
				}
			})
		}
	})

	t.Run("AttachAcrossContinueAsNew", func(t *testing.T) {
		c := dial1(t, addr)
		const can = "sbx-cmd-can"
		run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: can, TaskQueue: sandbox.DefaultQueue},
			workflows.Sandbox, workflows.SandboxInput{Provider: "linux", ContinueAfter: 40})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb("rm", can) })
		out, errOut, code := sb("exec", "--detach", can, "--", "sh", "-c", "echo first; exit 9")
		first := strings.TrimSpace(out)
		if code != 0 {
			t.Fatalf("exec --detach: exit %d, %s", code, errOut)
		}
		for i := 0; ; i++ {
			desc, err := c.DescribeWorkflowExecution(t.Context(), can, "")
			if err != nil {
				t.Fatal(err)
			}
			if desc.WorkflowExecutionInfo.Execution.RunId != run.GetRunID() {
				break
			}
			if i == 20 {
				t.Fatalf("after %d commands with ContinueAfter 40 events, still the first run", i)
			}
			if _, errOut, code := sb("exec", can, "--", "true"); code != 0 {
				t.Fatalf("exec: exit %d, %s", code, errOut)
			}
		}
		if out, errOut, code := sb("attach", can, first); code != 9 || out != "first\n" {
			t.Errorf("attach in the next run: exit %d, stdout %q, stderr %q; want 9, first", code, out, errOut)
		}
	})
}
