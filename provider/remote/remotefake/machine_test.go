package remotefake

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/errdefs"
)

func TestFiles(t *testing.T) {
	t.Parallel()
	m := newMachine(t, nil)
	data := bytes.Repeat([]byte("berth\n"), 100000)
	if err := m.WriteFile(t.Context(), "/workspace/a/b/c.txt", bytes.NewReader(data), 0o640); err != nil {
		t.Fatal(err)
	}
	out, _, _ := runCmd(t, m, Command{Argv: []string{"sh", "-c", "stat -c '%a %u' /workspace/a/b/c.txt /workspace/a; md5sum < /workspace/a/b/c.txt"}})
	want := "640 0\n755 0\n"
	if !strings.HasPrefix(out, want) {
		t.Fatalf("in the machine: %q, want %q first", out, want)
	}
	r, err := m.ReadFile(t.Context(), "/workspace/a/b/c.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(data))
	}
	t.Run("written in the machine", func(t *testing.T) {
		runCmd(t, m, Command{Argv: []string{"sh", "-c", "echo inside > /tmp/x"}})
		r, err := m.ReadFile(t.Context(), "/tmp/x")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if b, _ := io.ReadAll(r); string(b) != "inside\n" {
			t.Fatalf("read %q", b)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := m.ReadFile(t.Context(), "/workspace/nope"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("ReadFile of a missing file: %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		if _, err := m.ReadFile(t.Context(), "/workspace"); !errors.Is(err, errdefs.ErrBadInput) {
			t.Fatalf("ReadFile of a directory: %v, want ErrBadInput", err)
		}
	})
	t.Run("links stay inside", func(t *testing.T) {
		// A link to the host's files resolves in the machine's root.
		host, err := os.CreateTemp("", "remotefake-host")
		if err != nil {
			t.Fatal(err)
		}
		host.WriteString("host secret")
		host.Close()
		defer os.Remove(host.Name())
		runCmd(t, m, Command{Argv: []string{"sh", "-c", "ln -s " + host.Name() + " /tmp/escape; ln -s ../../../.. /tmp/up"}})
		if _, err := m.ReadFile(t.Context(), "/tmp/escape"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("ReadFile through a link to a host path: %v, want fs.ErrNotExist", err)
		}
		if err := m.WriteFile(t.Context(), "/tmp/up"+host.Name(), strings.NewReader("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(host.Name()); string(b) != "host secret" {
			t.Fatalf("the host's file holds %q", b)
		}
	})
	t.Run("too large", func(t *testing.T) {
		err := m.WriteFile(t.Context(), "/tmp/big", io.LimitReader(zeros{}, MaxFileSize+1), 0o644)
		if !errors.Is(err, errdefs.ErrBadInput) {
			t.Fatalf("WriteFile of more than MaxFileSize: %v, want ErrBadInput", err)
		}
		if _, err := m.ReadFile(t.Context(), "/tmp/big"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a refused file is there: %v", err)
		}
	})
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// serve starts a server on port in m that answers every connection with
// token, and waits until it listens.
func serve(t *testing.T, m *Machine, port int, token string) {
	t.Helper()
	prog := fmt.Sprintf(`
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", %d))
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(b"%s\n")
    c.close()
`, port, token)
	p, err := m.Start(t.Context(), Command{Argv: []string{"python3", "-c", prog}})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, p.Stdout())
	go io.Copy(io.Discard, p.Stderr())
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := m.Dial(t.Context(), port)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server in %s does not listen: %v", m.ID(), err)
		}
	}
}

func readToken(t *testing.T, m *Machine, port int) string {
	t.Helper()
	c, err := m.Dial(t.Context(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

func TestDialIsolation(t *testing.T) {
	t.Parallel()
	const port = 7070
	a, b := newMachine(t, nil), newMachine(t, nil)
	serve(t, a, port, "machine-a")
	serve(t, b, port, "machine-b")
	for range 3 {
		if got := readToken(t, a, port); got != "machine-a" {
			t.Fatalf("a's port %d answers %q", port, got)
		}
		if got := readToken(t, b, port); got != "machine-b" {
			t.Fatalf("b's port %d answers %q", port, got)
		}
	}
	// Nothing listens on the host's loopback there, nor in a third
	// machine.
	if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
		c.Close()
		t.Fatalf("the host's port %d answers", port)
	}
	c := newMachine(t, nil)
	if conn, err := c.Dial(t.Context(), port); err == nil {
		conn.Close()
		t.Fatalf("a machine without a server answers on port %d", port)
	}
	// Dials from many goroutines at once each reach their machine.
	var wg sync.WaitGroup
	for i := range 20 {
		m, want := a, "machine-a"
		if i%2 == 1 {
			m, want = b, "machine-b"
		}
		wg.Go(func() {
			conn, err := m.Dial(t.Context(), port)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			line, _ := bufio.NewReader(conn).ReadString('\n')
			if strings.TrimSpace(line) != want {
				t.Errorf("got %q, want %q", line, want)
			}
		})
	}
	wg.Wait()
}

// cpuTicks is the CPU time of host pid hp, in clock ticks.
func cpuTicks(t *testing.T, hp int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(hp) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}

func TestPause(t *testing.T) {
	t.Parallel()
	m := newMachine(t, nil)
	p, err := m.Start(t.Context(), Command{Argv: []string{"sh", "-c", "while :; do :; done"}})
	if err != nil {
		t.Fatal(err)
	}
	hps, err := m.HostPIDs()
	if err != nil {
		t.Fatal(err)
	}
	busy := 0
	for _, hp := range hps {
		if nsPID(hp) == p.PID() {
			busy = hp
		}
	}
	if busy == 0 {
		t.Fatalf("the busy process (%d) is not among the machine's host pids %v", p.PID(), hps)
	}
	waitCPU := func(from int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); cpuTicks(t, busy) <= from; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the busy process gets no CPU")
			}
		}
	}
	waitCPU(cpuTicks(t, busy))
	if err := m.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !m.Paused() {
		t.Fatal("Paused() is false after Pause")
	}
	if err := m.Pause(t.Context()); err != nil {
		t.Fatalf("a second Pause: %v", err)
	}
	before := cpuTicks(t, busy)
	time.Sleep(300 * time.Millisecond) // 30 ticks of a running loop
	if after := cpuTicks(t, busy); after != before {
		t.Fatalf("a paused process ran: %d ticks, then %d", before, after)
	}
	if _, err := m.Start(t.Context(), Command{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrSandboxPaused) {
		t.Fatalf("Start in a paused machine: %v, want ErrSandboxPaused", err)
	}
	if err := m.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	if m.Paused() {
		t.Fatal("Paused() is true after Resume")
	}
	waitCPU(before)
}

func TestDestroy(t *testing.T) {
	t.Parallel()
	m, err := farm.Create(t.Context(), "destroy-"+randomHex(3), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := farm.Create(t.Context(), m.ID(), nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("Create of an id in use: %v, want ErrAlreadyExists", err)
	}
	if got, err := farm.Machine(m.ID()); err != nil || got != m {
		t.Fatalf("Machine: %v, %v", got, err)
	}
	p, err := m.Start(t.Context(), Command{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := farm.docker.ContainerInspect(t.Context(), m.Container(), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the container after Destroy: %v, want not found", err)
	}
	if _, err := farm.Machine(m.ID()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Machine after Destroy: %v, want ErrNotFound", err)
	}
	if _, err := p.Wait(); !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Fatalf("Wait of a process of a destroyed machine: %v, want ErrSandboxLost", err)
	}
	if err := m.Destroy(t.Context()); err != nil {
		t.Fatalf("a second Destroy: %v", err)
	}
	if _, err := m.Start(t.Context(), Command{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Start after Destroy: %v, want ErrNotFound", err)
	}
	if _, err := m.ReadFile(t.Context(), "/etc/passwd"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("ReadFile after Destroy: %v, want ErrNotFound", err)
	}
	// Made again under the id, a new machine.
	m2, err := farm.Create(t.Context(), m.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Destroy(context.Background())
	if m2.Container() == m.Container() {
		t.Fatal("the same container again")
	}
}

// containers lists the containers that carry label key=value.
func containers(t *testing.T, key, value string) []string {
	t.Helper()
	list, err := farm.docker.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", key+"="+value)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

func TestClose(t *testing.T) {
	t.Parallel()
	f, err := NewFarm(t.Context(), Options{Label: "remotefake-close-" + randomHex(4)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := f.Create(t.Context(), strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(containers(t, FarmLabel, f.Label())); n != 2 {
		t.Fatalf("%d containers of the farm, want 2", n)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := containers(t, FarmLabel, f.Label()); len(ids) != 0 {
		t.Fatalf("containers left after Close: %v", ids)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	// A container of a farm whose process has exited: its start time is
	// not this process's.
	ns, _, _ := strings.Cut(farm.owner, ":")
	label := "remotefake-sweep-" + randomHex(4)
	created, err := farm.docker.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Config: &container.Config{Image: farm.image, Cmd: []string{"sleep", "infinity"},
			Labels: map[string]string{FarmLabel: label, labelOwner: ns + ":" + strconv.Itoa(os.Getpid()) + ":1"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer farm.remove(context.Background(), created.ID)
	live := newMachine(t, nil)
	f, err := NewFarm(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ids := containers(t, FarmLabel, label); len(ids) != 0 {
		t.Fatalf("the leftover container is there: %v", ids)
	}
	if out, _, _ := runCmd(t, live, Command{Argv: []string{"echo", "alive"}}); out != "alive\n" {
		t.Fatalf("a live farm's machine says %q", out)
	}
}

func TestNewFarmRefuses(t *testing.T) {
	t.Parallel()
	_, err := NewFarm(t.Context(), Options{Image: "berth-no-such-image:1"})
	if !errors.Is(err, errdefs.ErrNotFound) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("NewFarm without its image: %q, want one line wrapping ErrNotFound", err)
	}
}

func TestNewFarmNoEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	_, err := NewFarm(t.Context(), Options{})
	if !errors.Is(err, errdefs.ErrUnsupported) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("NewFarm without an engine: %q, want one line wrapping ErrUnsupported", err)
	}
}
