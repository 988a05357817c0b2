package sandboxd

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
)

// memoryCgroup makes a cgroup v1 memory cgroup below this process's, and
// removes it when the test ends, moving back any of this process's
// threads still in it.
func memoryCgroup(t *testing.T) (dir, parent string) {
	t.Helper()
	const root = "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "tasks")); err != nil {
		t.Skipf("skipped: no cgroup v1 memory hierarchy at %s (CommandCgroup is for cgroup v1 hosts): %v", root, err)
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == "memory" {
			parent = filepath.Join(root, f[2])
		}
	}
	if parent == "" {
		t.Fatalf("no memory cgroup in /proc/self/cgroup: %s", b)
	}
	dir = filepath.Join(parent, "sandboxd-test-"+newID())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b, _ := os.ReadFile(filepath.Join(dir, "tasks"))
		for _, tid := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(parent, "tasks"), []byte(tid), 0)
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
	})
	return dir, parent
}

// TestCommandCgroup: with CommandCgroup, commands are born in that
// cgroup, and of the daemon only the thread that forks them is there.
func TestCommandCgroup(t *testing.T) {
	dir, parent := memoryCgroup(t)
	tasks, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	s, err := New(Config{Workspace: t.TempDir(), UID: os.Geteuid(), GID: os.Getegid(), CommandCgroup: tasks})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	c := NewClient(UnixDialer(sock))
	defer func() {
		c.Close()
		s.Shutdown(t.Context())
	}()

	for range 3 {
		var out bytes.Buffer
		res, err := c.Exec(t.Context(), provider.ExecRequest{Argv: []string{"/bin/cat", "/proc/self/cgroup"}, Stdout: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v, %v", res, err)
		}
		want := ":memory:" + strings.TrimPrefix(dir, "/sys/fs/cgroup/memory") + "\n"
		if !strings.Contains(out.String(), want) {
			t.Errorf("a command's cgroups:\n%s\nwant a line ending %q", out.String(), want)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	tids := strings.Fields(string(b))
	if len(tids) != 1 {
		t.Fatalf("threads in the commands' cgroup: %v; want the forking thread alone", tids)
	}
	if _, err := os.Stat("/proc/self/task/" + tids[0]); err != nil {
		t.Errorf("thread %s in the commands' cgroup is not the daemon's: %v", tids[0], err)
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "tasks")); !strings.Contains("\n"+string(b), "\n"+strconv.Itoa(os.Getpid())+"\n") {
		t.Errorf("the daemon's main thread %d left its cgroup", os.Getpid())
	}
}

// TestCommandCgroupRefused: a CommandCgroup that cannot take the forking
// thread fails New, instead of commands running outside it.
func TestCommandCgroupRefused(t *testing.T) {
	dir, _ := memoryCgroup(t)
	tasks, err := os.Open(filepath.Join(dir, "tasks")) // read only
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	_, err = New(Config{Workspace: t.TempDir(), CommandCgroup: tasks})
	if err == nil || !strings.Contains(err.Error(), "commands' cgroup") {
		t.Errorf("New with a read-only tasks file: %v; want an error about the commands' cgroup", err)
	}
}

// TestCommandCgroupNamespace: with CgroupNamespace, commands see the
// commands' cgroup as the root of their cgroups, and each command still
// starts in it.
func TestCommandCgroupNamespace(t *testing.T) {
	dir, _ := memoryCgroup(t)
	tasks, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	_, sock := serveConfig(t, Config{CommandCgroup: tasks, CgroupNamespace: true})
	c := NewClient(UnixDialer(sock))
	defer c.Close()
	for range 2 {
		var out bytes.Buffer
		res, err := c.Exec(t.Context(), provider.ExecRequest{Argv: []string{"/bin/cat", "/proc/self/cgroup"}, Stdout: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v, %v", res, err)
		}
		if !strings.Contains(out.String(), ":memory:/\n") {
			t.Errorf("a command's cgroups:\n%s\nwant its memory cgroup seen as /", out.String())
		}
		b, err := os.ReadFile(filepath.Join(dir, "tasks"))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(strings.Fields(string(b))); n != 1 {
			t.Errorf("%d threads in the commands' cgroup; want the forking thread alone", n)
		}
	}
}
