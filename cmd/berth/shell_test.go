package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"go.temporal.io/sdk/client"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
)

// ptyTerm is a berth process on a real pseudo-terminal, as a user's
// terminal emulator would run it: the test types into the master and
// reads the screen from it.
type ptyTerm struct {
	master, slave *os.File
	cmd           *exec.Cmd
	exited        chan struct{}
	mu            sync.Mutex
	screen        []byte
}

// startOnPTY starts berth args on a new pseudo-terminal of rows x cols.
func startOnPTY(t testing.TB, berth string, rows, cols uint16, args ...string) *ptyTerm {
	t.Helper()
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var unlock int32
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatal(errno)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(int(n)), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &ptyTerm{master: os.NewFile(uintptr(mfd), "ptmx"), slave: os.NewFile(uintptr(sfd), "pts"), exited: make(chan struct{})}
	p.resize(t, rows, cols)
	p.cmd = exec.Command(berth, args...)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = p.slave, p.slave, p.slave
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	p.cmd.Dir = t.TempDir()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := p.master.Read(buf)
			p.mu.Lock()
			p.screen = append(p.screen, buf[:n]...)
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		p.master.Close()
		p.slave.Close()
	})
	return p
}

func (p *ptyTerm) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.screen)
}

// resize sets the terminal's size; the kernel sends berth SIGWINCH.
func (p *ptyTerm) resize(t testing.TB, rows, cols uint16) {
	t.Helper()
	if err := unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
}

func (p *ptyTerm) typeIn(t testing.TB, s string) {
	t.Helper()
	if _, err := p.master.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until the screen after from holds want, and returns
// where it ends.
func (p *ptyTerm) waitFor(t testing.TB, from int, want string) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var exitedAt time.Time
	for {
		out := p.String()
		if i := strings.Index(out[from:], want); i >= 0 {
			return from + i + len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screen lacks %q; after %d it shows %q", want, from, out[from:])
		}
		// What berth wrote before it exited may still be on its way: the
		// kernel hands a terminal's output to its master in the
		// background, which a loaded machine runs late.
		if !exitedAt.IsZero() && time.Since(exitedAt) > ptyDrain {
			t.Fatalf("berth exited (%v) and, %v after, the screen lacks %q; it shows %q", p.cmd.ProcessState, ptyDrain, want, out[from:])
		}
		select {
		case <-p.exited:
			if exitedAt.IsZero() {
				exitedAt = time.Now()
			}
			time.Sleep(2 * time.Millisecond)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// ptyDrain is how long waitFor looks for output after berth exited.
const ptyDrain = 5 * time.Second

func (p *ptyTerm) wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatalf("berth still running; the screen shows %q", p.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// historyWork is the number of events in a workflow's history other
// than its workflow tasks': a loaded machine times tasks out and
// schedules them again, adding events that say nothing of the work the
// workflow was given.
func historyWork(t testing.TB, c client.Client, id string) int {
	t.Helper()
	it := c.GetWorkflowHistory(t.Context(), id, "", false, 0)
	n := 0
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(e.GetEventType().String(), "WorkflowTask") {
			n++
		}
	}
	return n
}

// TestSandboxShell runs berth sandbox shell on a real terminal, against
// one server and worker for all its cases: keys echoed, the terminal's
// size and resizes, ^C reaching the shell, the exit code, the local
// terminal put back; a server restart under a shell; a shell lost with
// its sandbox; a shell in a coding agent session's sandbox, by the
// session's id.
func TestSandboxShell(t *testing.T) {
	t.Parallel()
	berth, data := berthBinary(t), dataDir(t)
	srv := startServer(t, data, "127.0.0.1:0")
	addr := srv.Address()
	startWorker(t, berth, addr, data, "worker")
	c := dial1(t, addr)
	out, errOut, code := runBerth(t, berth, "sandbox", "create", "--address", addr)
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("berth sandbox create: exit %d: %s", code, errOut)
	}
	outer := t // the server restarted lives on after its subtest
	shell := func(t *testing.T) *ptyTerm {
		return startOnPTY(t, berth, 30, 100, "sandbox", "shell", "--address", addr, "--env", "PS1=$ ", id, "--", "/bin/sh")
	}

	t.Run("Session", func(t *testing.T) {
		p := shell(t)
		at := p.waitFor(t, 0, "$ ")
		p.typeIn(t, "stty size\r")
		at = p.waitFor(t, at, "30 100")

		// Key by key, each echoed by the sandbox's terminal before the
		// next: the keys add nothing to the workflow's history.
		before := historyWork(t, c, id)
		var took []time.Duration
		line, lineAt := "echo ", at
		p.typeIn(t, line)
		at = p.waitFor(t, at, line)
		for i := range 60 {
			start := time.Now()
			p.typeIn(t, "k")
			p.waitFor(t, lineAt, line+strings.Repeat("k", i+1))
			took = append(took, time.Since(start))
		}
		p.typeIn(t, "\r")
		at = p.waitFor(t, at, "\n"+strings.Repeat("k", 60))
		if added := historyWork(t, c, id) - before; added > 5 {
			t.Errorf("66 keys added %d events (beside workflow tasks) to the sandbox's history, want at most 5:\n%s", added, historyTail(t, c, id, 2*added))
		}
		slices.Sort(took)
		t.Logf("key to echo through the server: median %v, p90 %v", took[len(took)/2], took[len(took)*9/10])

		p.resize(t, 40, 120)
		// The resize reaches the sandbox shortly after SIGWINCH: ask
		// until it says so.
		testkit.Eventually(t, "the resize to reach the sandbox", 10*time.Second, func() bool {
			p.typeIn(t, "stty size\r")
			return strings.Contains(p.String()[at:], "40 120")
		})
		at = len(p.String())

		p.typeIn(t, "sh -c 'echo sleep''ing; exec sleep 60'\r")
		at = p.waitFor(t, at, "sleeping")
		p.typeIn(t, "\x03")
		p.typeIn(t, "echo status=$?\r")
		at = p.waitFor(t, at, "status=130")

		p.typeIn(t, "exit 7\r")
		if code := p.wait(t); code != 7 {
			t.Errorf("berth sandbox shell: exit %d, want the shell's 7; screen %q", code, p.String()[at:])
		}
		tio, err := unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&(unix.ECHO|unix.ICANON) != unix.ECHO|unix.ICANON {
			t.Errorf("the terminal is left raw (lflag %#x)", tio.Lflag)
		}
	})

	t.Run("ExecTTY", func(t *testing.T) {
		p := startOnPTY(t, berth, 25, 90, "sandbox", "exec", "--address", addr, "-t", id, "--", "sh", "-c", "stty size; tty; exit 3")
		p.waitFor(t, 0, "25 90")
		p.waitFor(t, 0, "/dev/pts/")
		if code := p.wait(t); code != 3 {
			t.Errorf("berth sandbox exec -t: exit %d, want 3; screen %q", code, p.String())
		}
	})

	t.Run("ServerRestart", func(t *testing.T) {
		p := shell(t)
		at := p.waitFor(t, 0, "$ ")
		if err := srv.Stop(); err != nil {
			t.Fatalf("stop the server: %v", err)
		}
		srv = startServer(outer, data, addr)
		p.typeIn(t, "echo after-''restart\r")
		at = p.waitFor(t, at, "after-restart")
		p.typeIn(t, "exit 3\r")
		if code := p.wait(t); code != 3 {
			t.Errorf("berth sandbox shell across a server restart: exit %d, want 3; screen %q", code, p.String()[at:])
		}
	})

	t.Run("Lost", func(t *testing.T) {
		p := shell(t)
		at := p.waitFor(t, 0, "$ ")
		// The sandbox's daemon, and with it the shell, is killed.
		pid := sandboxDaemon(t, data)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t); code != exitBerth {
			t.Errorf("a lost shell: exit %d, want %d; screen %q", code, exitBerth, p.String()[at:])
		}
		// berth has exited; what it printed last may still be on its way
		// through the terminal to the test's reader.
		said := ""
		testkit.Eventually(t, "the lost shell's last line on the screen", 30*time.Second, func() bool {
			said = strings.TrimSpace(p.String()[at:])
			return strings.Contains(strings.ToLower(said), "lost")
		})
		if strings.Count(said, "\n") > 0 {
			t.Errorf("a lost shell: the screen shows %q, want one line saying it was lost", said)
		}
	})

	t.Run("SessionID", sessionShell)
}

// BenchmarkShellEcho measures what a person feels typing into berth
// sandbox shell: one op is a key typed into berth's terminal (a real
// pty) and its echo, by the sandbox's terminal, back on the screen,
// through berth dev's embedded server (relay write, input poll, output
// store and read) and a linux sandbox. The screen is looked at every
// 2 ms, the figure's resolution.
func BenchmarkShellEcho(b *testing.B) {
	berth, data := berthBinary(b), dataDir(b)
	var devLog testkit.SyncBuffer
	dev, port := startDev(b, berth, data, 0, &devLog)
	b.Cleanup(func() { stopDev(b, dev, &devLog) })
	dumpOnFailure(b, "berth dev", &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	out, errOut, code := runBerth(b, berth, "sandbox", "create", "--address", addr)
	if code != 0 {
		b.Fatalf("berth sandbox create: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	p := startOnPTY(b, berth, 30, 100, "sandbox", "shell", "--address", addr, "--env", "PS1=$ ", id, "--", "/bin/sh")
	at := p.waitFor(b, 0, "$ ")
	// Keys go on a comment line, ended before it is long: the shell
	// runs nothing of them.
	const perLine = 80
	newLine := func() {
		p.typeIn(b, "#")
		at = p.waitFor(b, at, "#")
	}
	newLine()
	keys := 0
	for b.Loop() {
		if keys == perLine {
			b.StopTimer()
			p.typeIn(b, "\r")
			at = p.waitFor(b, at, "$ ")
			newLine()
			keys = 0
			b.StartTimer()
		}
		p.typeIn(b, "k")
		at = p.waitFor(b, at, "k")
		keys++
	}
	b.StopTimer()
	p.typeIn(b, "\rexit 0\r")
	if code := p.wait(b); code != 0 {
		b.Errorf("berth sandbox shell: exit %d; screen %q", code, p.String()[at:])
	}
}

// TestSandboxShell's SessionID case: berth sandbox shell on a coding
// agent session's id opens the shell in the session's sandbox, waking
// it from a pause, and nothing typed enters the conversation.
func sessionShell(t *testing.T) {
	s := startSessionCLI(t)
	id := strings.TrimSpace(s.ok("new", "--title", "shell"))
	s.model.Script(shellCall("c1", "echo from-the-turn > turn.txt"), fakemodel.Reply{Text: "turn.txt is written."})
	s.ok("send", id, "write turn.txt")
	state := func() agent.State {
		t.Helper()
		return decode[agent.State](t, "session show -o json", s.ok("show", id, "-o", "json"))
	}
	messages := state().Messages
	s.ok("pause", id)

	p := startOnPTY(t, s.berth, 24, 80, "sandbox", "shell", "--address", s.addr, "--env", "PS1=$ ", id, "--", "/bin/sh")
	at := p.waitFor(t, 0, "$ ")
	p.typeIn(t, "cat turn.txt; stty size; echo typed-by-''the-person\r")
	at = p.waitFor(t, at, "from-the-turn")
	at = p.waitFor(t, at, "24 80")
	at = p.waitFor(t, at, "typed-by-the-person")
	p.typeIn(t, "exit 4\r")
	if code := p.wait(t); code != 4 {
		t.Errorf("berth sandbox shell %s: exit %d, want the shell's 4; screen %q", id, code, p.String()[at:])
	}
	in := decode[inspection](t, "inspect -o json", runOK(t, s.berth, "sandbox", "inspect", "--address", s.addr, id, "-o", "json"))
	if in.State != "running" {
		t.Errorf("after the shell, the session's sandbox is %s, want running", in.State)
	}
	if n := state().Messages; n != messages {
		t.Errorf("the conversation holds %d messages after the shell, was %d", n, messages)
	}
	s.model.Script(fakemodel.Reply{Text: "still here"})
	if out := s.ok("send", id, "still there?"); out != "still here\n" {
		t.Errorf("send after the shell: %q", out)
	}
	for _, req := range s.model.Requests() {
		if carries(req, "typed-by") {
			t.Errorf("the model was sent what the person typed: %+v", req.Messages)
		}
	}
}

// sandboxDaemon is the pid of the daemon of data's only running linux
// sandbox.
func sandboxDaemon(t testing.TB, data string) int {
	t.Helper()
	for _, dir := range sandboxDirs(t.(*testing.T), data) {
		b, err := os.ReadFile(filepath.Join(data, "linux", dir, "sandbox.json"))
		if err != nil {
			continue
		}
		var rec struct {
			PID int `json:"pid"`
		}
		if json.Unmarshal(b, &rec) == nil && rec.PID != 0 && syscall.Kill(rec.PID, 0) == nil {
			return rec.PID
		}
	}
	t.Fatal(fmt.Errorf("no running sandbox in %s", data))
	return 0
}
