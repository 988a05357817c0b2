package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
)

// decode parses one JSON document, failing the test if it is not one.
func decode[T any](t *testing.T, what, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: not JSON (%v): %q", what, err, s)
	}
	return v
}

// lines splits output into its lines, without the empty last one.
func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

// TestVersionCommand: berth version and --version say the same, without
// a server (the address names nothing), and -o json has the fields.
func TestVersionCommand(t *testing.T) {
	berth := build(t)
	nowhere := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	text, errOut, code := runBerth(t, berth, "version", "--address", nowhere)
	if code != 0 || !strings.HasPrefix(text, "berth ") || !strings.Contains(text, "\ngo: go1.") ||
		!strings.Contains(text, "temporal sdk: v1.") {
		t.Fatalf("version: exit %d, %q, stderr %q", code, text, errOut)
	}
	if flag, _, code := runBerth(t, berth, "--version"); code != 0 || flag != text {
		t.Errorf("--version: exit %d, %q; want %q", code, flag, text)
	}
	out, _, code := runBerth(t, berth, "version", "-o", "json")
	v := decode[map[string]any](t, "version -o json", out)
	if code != 0 || v["go_version"] == "" || v["temporal_sdk_version"] == nil || v["version"] == nil {
		t.Errorf("version -o json: exit %d, %v", code, v)
	}
}

// TestCLIConventions drives what users of docker, kubectl and temporal
// expect, against a real berth dev: -o json and jsonl, -q, sandbox
// inspect, run ls and run cancel (and berth run -- ls still running
// ls), and completion of ids through cobra's __complete.
func TestCLIConventions(t *testing.T) {
	t.Parallel()
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	b := func(args ...string) (string, string, int) {
		t.Helper()
		return runBerth(t, berth, append([]string{"--address", addr}, args...)...)
	}
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := b(args...)
		if code != 0 {
			t.Fatalf("berth %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}

	t.Run("providers", func(t *testing.T) {
		text := ok("providers")
		if !regexp.MustCompile(`(?m)^linux +ready +berth +\S*pause`).MatchString(text) {
			t.Errorf("berth providers:\n%s", text)
		}
		list := decode[[]provider.Availability](t, "providers -o json", ok("providers", "-o", "json"))
		i := slices.IndexFunc(list, func(s provider.Availability) bool { return s.Name == "linux" })
		if i < 0 || !list[i].Available || list[i].Capabilities == nil || !list[i].Capabilities.Disk {
			t.Errorf("berth providers -o json: %+v", list)
		}
	})

	t.Run("bad output format", func(t *testing.T) {
		for _, args := range [][]string{{"sandbox", "ls", "-o", "yaml"}, {"run", "-o", "xml", "--", "true"}, {"version", "-o", "jsonl"}} {
			out, errOut, code := b(args...)
			if code != 2 || out != "" || !strings.Contains(errOut, "--help") {
				t.Errorf("berth %v: exit %d, stdout %q, stderr %q; want exit 2 and a hint", args, code, out, errOut)
			}
		}
	})

	t.Run("run", func(t *testing.T) {
		// ls is a subcommand of run; after "--" it is the command.
		if out := ok("run", "--", "ls", "/"); !slices.Contains(lines(out), "workspace") {
			t.Errorf("berth run -- ls /: %q", out)
		}
		out, _, code := b("run", "-o", "json", "--", "sh", "-c", "echo out; echo err >&2; exit 4")
		r := decode[commandResult](t, "run -o json", out)
		if code != 4 || r.ExitCode != 4 || deref(r.Stdout) != "out\n" || deref(r.Stderr) != "err\n" || r.Truncated ||
			!strings.HasPrefix(r.ID, "run-") || r.StdoutBytes != 4 {
			t.Errorf("run -o json: exit %d, %s", code, out)
		}
		// Past --max-output, what is printed is not the whole: marked,
		// and berth's own exit.
		out, _, code = b("run", "-o", "json", "--max-output", "1Ki", "--", "sh", "-c", "seq 1 100000")
		r = decode[commandResult](t, "run -o json past the cap", out)
		if code != exitBerth || !r.Truncated || r.StdoutDropped == 0 || r.StdoutBytes != 588895 || r.Error == "" {
			t.Errorf("run -o json past its cap: exit %d, %+v", code, r)
		}
	})

	t.Run("run ls and cancel", func(t *testing.T) {
		id := strings.TrimSpace(ok("run", "--detach", "--", "sh", "-c", "sleep 60"))
		if ids := lines(ok("run", "ls", "-q")); !slices.Contains(ids, id) {
			t.Fatalf("run ls -q: %v, want %s", ids, id)
		}
		table := ok("run", "ls")
		if !strings.HasPrefix(table, "ID") || !strings.Contains(table, id+"  running") || !strings.Contains(table, "sh -c sleep 60") {
			t.Errorf("run ls:\n%s", table)
		}
		rows := decode[[]runRow](t, "run ls -o json", ok("run", "ls", "-o", "json"))
		if len(rows) != 1 || rows[0].ID != id || rows[0].State != "running" || rows[0].Command != "sh -c sleep 60" {
			t.Errorf("run ls -o json: %+v", rows)
		}
		if out := ok("run", "cancel", id); out != id+"\n" {
			t.Errorf("run cancel: %q", out)
		}
		if left := sandboxDirs(t, data); len(left) > 0 {
			t.Errorf("sandboxes left after run cancel: %v", left)
		}
		if ids := ok("run", "ls", "-q"); ids != "" {
			t.Errorf("run ls after the cancel: %q", ids)
		}
		if out := ok("run", "ls", "-a"); !strings.Contains(out, id+"  canceled") {
			t.Errorf("run ls -a:\n%s", out)
		}
		// An ended run shows how its command ended.
		seven, _, _ := b("run", "--detach", "--", "sh", "-c", "exit 7")
		seven = strings.TrimSpace(seven)
		if _, _, code := b("logs", seven); code != 7 {
			t.Fatalf("logs of a run that exits 7: exit %d", code)
		}
		testkit.Eventually(t, "run ls -a to show exited 7", 10*time.Second, func() bool {
			out, _, _ := b("run", "ls", "-a")
			return strings.Contains(out, seven+"  exited 7")
		})
		all := decode[[]runRow](t, "run ls -a -o json", ok("run", "ls", "-a", "-o", "json"))
		if i := slices.IndexFunc(all, func(r runRow) bool { return r.ID == seven }); i < 0 || all[i].ExitCode == nil || *all[i].ExitCode != 7 {
			t.Errorf("run ls -a -o json: %+v; want exit_code 7 for %s", all, seven)
		}
		for _, again := range []string{id, "run-nosuchrun"} {
			if _, errOut, code := b("run", "cancel", again); code != exitBerth || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "NotFound") {
				t.Errorf("run cancel %s: exit %d, stderr %q; want 125 and one line", again, code, errOut)
			}
		}
	})

	t.Run("run jsonl", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), commandTimeout)
		defer cancel()
		// The command prints its second line only once the test has
		// seen the first event: berth run that printed nothing before
		// the command's end would never see it.
		cmd := exec.CommandContext(ctx, berth, "--address", addr, "run", "-o", "jsonl", "--", "sh", "-c", "echo first; "+waitGo+"; echo second >&2; exit 3")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		firstc := make(chan string, 1)
		go func() {
			sc.Scan()
			firstc <- sc.Text()
		}()
		var got []string
		select {
		case first := <-firstc:
			got = append(got, first)
		case <-time.After(time.Minute):
			t.Fatal("no event within a minute while the command ran: not live")
		}
		touchRunningSandboxes(t, data, "go")
		for sc.Scan() {
			got = append(got, sc.Text())
		}
		err = cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
			t.Errorf("run -o jsonl: %v, want exit 3", err)
		}
		if len(got) != 3 || got[0] != `{"stream":"stdout","data":"first\n"}` || got[1] != `{"stream":"stderr","data":"second\n"}` {
			t.Fatalf("events: %q", got)
		}
		if r := decode[commandResult](t, "the last event", got[2]); r.ExitCode != 3 || r.Stdout != nil {
			t.Errorf("last event: %s", got[2])
		}
	})

	id := decode[idResult](t, "create -o json", ok("sandbox", "create", "-o", "json", "--env", "SECRET=hunter2", "--memory", "256Mi")).ID
	t.Run("sandbox ls", func(t *testing.T) {
		if ids := ok("sandbox", "ls", "-q"); ids != id+"\n" {
			t.Errorf("ls -q: %q, want %s", ids, id)
		}
		rows := decode[[]sandboxRow](t, "ls -o json", ok("sandbox", "ls", "-o", "json"))
		if len(rows) != 1 || rows[0].ID != id || rows[0].State != "running" || rows[0].Provider != "linux" || rows[0].Owner != "" {
			t.Errorf("ls -o json: %+v", rows)
		}
		if row := decode[sandboxRow](t, "ls -o jsonl", ok("sandbox", "ls", "-o", "jsonl")); row.ID != id {
			t.Errorf("ls -o jsonl: %+v", row)
		}
	})

	t.Run("exec", func(t *testing.T) {
		out, errOut, code := b("sandbox", "exec", id, "-o", "json", "--", "sh", "-c", "sleep 1; printf 'caf\\303\\251'; echo err >&2; exit 3")
		r := decode[commandResult](t, "exec -o json", out)
		if code != 3 || r.ExitCode != 3 || deref(r.Stdout) != "café" || deref(r.Stderr) != "err\n" || r.ID != id || r.Duration < 1 {
			t.Errorf("exec -o json: exit %d, %s (stderr %q)", code, out, errOut)
		}
		out, _, code = b("sandbox", "exec", id, "-o", "jsonl", "--", "sh", "-c", "kill -TERM $$")
		if code != 128+15 || !strings.Contains(out, `"signal":"SIGTERM"`) {
			t.Errorf("exec -o jsonl of a killed command: exit %d, %q", code, out)
		}
		if _, errOut, code := b("sandbox", "exec", "sbx-nosuch", "-o", "json", "--", "true"); code != exitBerth || !strings.Contains(errOut, "NotFound") {
			t.Errorf("exec on a missing sandbox: exit %d, %q", code, errOut)
		}
	})

	t.Run("inspect", func(t *testing.T) {
		in := decode[map[string]any](t, "inspect -o json", ok("sandbox", "inspect", "-o", "json", id))
		if in["id"] != id || in["state"] != "running" || in["provider"] != "linux" || in["generation"] != 1.0 ||
			in["commands"] != 2.0 || in["memory_bytes"] != float64(256<<20) || in["idle_timeout_seconds"] != 300.0 ||
			in["lifetime_seconds"] != 86400.0 || fmt.Sprint(in["env_keys"]) != "[SECRET]" {
			t.Errorf("inspect -o json: %v", in)
		}
		// The command above slept a second: the sandbox was active at
		// least that long, and held longer.
		held, active := in["held_seconds"].(float64), in["active_seconds"].(float64)
		if active < 1 || held < active {
			t.Errorf("held %vs, active %vs; want active >= 1s and held >= active", held, active)
		}
		text := ok("sandbox", "inspect", id)
		if strings.Contains(text, "hunter2") || !strings.Contains(text, "\nstate: running\n") || !strings.Contains(text, "\nenv_keys: SECRET\n") {
			t.Errorf("inspect:\n%s", text)
		}
		// Every key of the JSON is a line of the text.
		for k := range in {
			if !strings.Contains("\n"+text, "\n"+k+":") {
				t.Errorf("inspect's text has no %s line", k)
			}
		}
		if _, errOut, code := b("sandbox", "inspect", "sbx-nosuch"); code != exitBerth || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "NotFound") {
			t.Errorf("inspect of a missing sandbox: exit %d, %q", code, errOut)
		}
	})

	snap := decode[idResult](t, "snapshot -o json", ok("sandbox", "snapshot", "-o", "json", id)).ID
	t.Run("snapshots", func(t *testing.T) {
		if ids := ok("snapshot", "ls", "-q"); ids != snap+"\n" {
			t.Errorf("snapshot ls -q: %q, want %s", ids, snap)
		}
		rows := decode[[]snapshotRow](t, "snapshot ls -o json", ok("snapshot", "ls", "-o", "json"))
		if len(rows) != 1 || rows[0].ID != snap || rows[0].Sandbox != id || rows[0].Kind != "user" {
			t.Errorf("snapshot ls -o json: %+v", rows)
		}
		if row := decode[snapshotRow](t, "snapshot ls -o jsonl", ok("snapshot", "ls", "-o", "jsonl")); row.ID != snap {
			t.Errorf("snapshot ls -o jsonl: %+v", row)
		}
	})

	t.Run("completion", func(t *testing.T) {
		complete := func(args ...string) []string {
			t.Helper()
			out := ok(append([]string{"__complete"}, args...)...)
			var words []string
			for _, l := range lines(out) {
				if !strings.HasPrefix(l, ":") {
					w, _, _ := strings.Cut(l, "\t")
					words = append(words, w)
				}
			}
			return words
		}
		for _, c := range [][]string{
			{"sandbox", "exec", ""}, {"sandbox", "inspect", ""}, {"sandbox", "rm", ""}, {"sandbox", "pause", ""},
			{"sandbox", "resume", ""}, {"sandbox", "hibernate", ""}, {"sandbox", "snapshot", ""}, {"sandbox", "fork", ""},
		} {
			if got := complete(c...); !slices.Equal(got, []string{id}) {
				t.Errorf("complete %v: %q, want %s", c, got, id)
			}
		}
		if got := complete("sandbox", "cp", "x", ""); !slices.Equal(got, []string{id + ":"}) {
			t.Errorf("complete cp: %q", got)
		}
		if got := complete("sandbox", "exec", id, ""); len(got) != 0 {
			t.Errorf("complete exec's command: %q, want nothing", got)
		}
		for _, c := range [][]string{{"snapshot", "rm", ""}, {"sandbox", "create", "--from-snapshot", ""}} {
			if got := complete(c...); !slices.Equal(got, []string{snap}) {
				t.Errorf("complete %v: %q, want %s", c, got, snap)
			}
		}
		if out := ok("completion", "bash"); !strings.Contains(out, "__start_berth") {
			t.Errorf("completion bash: no script")
		}
	})

	fork := decode[idResult](t, "fork -o json", ok("sandbox", "fork", "-o", "json", id)).ID
	if rows := decode[[]sandboxRow](t, "ls -o json", ok("sandbox", "ls", "-o", "json")); len(rows) != 2 {
		t.Errorf("after the fork, ls -o json: %+v", rows)
	}
	ok("sandbox", "rm", id, fork)
	ok("snapshot", "rm", snap)
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
