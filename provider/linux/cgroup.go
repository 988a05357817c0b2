package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

const cgroupRoot = "/sys/fs/cgroup"

// The v1 controllers a sandbox uses: limits, and the freezer to pause.
var v1Controllers = []cgroup1.Name{cgroup1.Memory, cgroup1.Cpu, cgroup1.Pids, cgroup1.Freezer}

// cgroupPaths records where a sandbox's cgroups are, so that a process
// other than the one that made them, in another cgroup, finds them.
type cgroupPaths struct {
	V1 map[cgroup1.Name]string `json:"v1,omitempty"` // controller => path below its mount
	V2 string                  `json:"v2,omitempty"` // path below the unified mount
}

// cgroup is a sandbox's cgroups, on v1 controllers on legacy and hybrid
// hosts, on the unified hierarchy otherwise.
type cgroup struct {
	paths cgroupPaths
	v1    cgroup1.Cgroup
	v2    *cgroup2.Manager
}

// cgroupName is where sandbox cgroups go, below berth's own cgroup.
func cgroupName(id string) string { return "berth/" + id }

func v1Hierarchy() ([]cgroup1.Subsystem, error) {
	return []cgroup1.Subsystem{
		cgroup1.NewMemory(cgroupRoot), cgroup1.NewCpu(cgroupRoot),
		cgroup1.NewPids(cgroupRoot), cgroup1.NewFreezer(cgroupRoot),
	}, nil
}

// pathsFor says where the cgroups of sandbox id go: below the cgroups of
// this process, in each controller.
func pathsFor(id string) (cgroupPaths, error) {
	if cgroups.Mode() == cgroups.Unified {
		group, err := cgroup2.NestedGroupPath(cgroupName(id))
		return cgroupPaths{V2: group}, err
	}
	nested := cgroup1.NestedPath(cgroupName(id))
	paths := cgroupPaths{V1: map[cgroup1.Name]string{}}
	for _, name := range v1Controllers {
		p, err := nested(name)
		if err != nil {
			return paths, fmt.Errorf("cgroup v1 controller %s: %w", name, err)
		}
		paths.V1[name] = p
	}
	return paths, nil
}

// cmdsCgroup is the child of a sandbox's v1 memory cgroup that its
// commands are born in: its limit is the sandbox's less the daemon's
// reserve (KernelLimits.MemoryReserve), and the daemon is in the parent.
// (On cgroup v2 a memory cgroup cannot hold both processes and children,
// nor take threads one by one: commands and daemon share one.)
const cmdsCgroup = "cmds"

// newCgroup makes a sandbox's cgroups with its limits set, the limit of
// its commands' memory being cmdsMemory.
func newCgroup(paths cgroupPaths, res provider.Resources, cmdsMemory int64) (c *cgroup, err error) {
	if paths.V2 != "" {
		m, err := cgroup2.NewManager(cgroupRoot, paths.V2, v2Resources(res))
		if err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", paths.V2, err)
		}
		return &cgroup{paths: paths, v2: m}, nil
	}
	cg, err := cgroup1.New(paths.v1Path(), v1Resources(res), cgroup1.WithHierarchy(v1Hierarchy))
	if err != nil {
		return nil, fmt.Errorf("create cgroups: %w", err)
	}
	c = &cgroup{paths: paths, v1: cg}
	if err := os.Mkdir(c.cmdsDir(), 0o755); err != nil {
		_ = cg.Delete()
		return nil, fmt.Errorf("create commands' cgroup: %w", err)
	}
	if err := c.setCommandMemory(cmdsMemory); err != nil {
		_ = c.destroy(context.Background())
		return nil, err
	}
	return c, nil
}

// cmdsDir is the directory of the commands' memory cgroup (v1).
func (c *cgroup) cmdsDir() string {
	return filepath.Join(cgroupRoot, string(cgroup1.Memory), c.paths.V1[cgroup1.Memory], cmdsCgroup)
}

func (c *cgroup) setCommandMemory(limit int64) error {
	if c.v1 == nil {
		return nil
	}
	if err := os.WriteFile(filepath.Join(c.cmdsDir(), "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		return fmt.Errorf("set commands' memory limit: %w", err)
	}
	return nil
}

// cmdsTasks opens the file that moves a thread into the commands' memory
// cgroup, for the daemon: a thread writes 0 to it to move itself, and
// what it forks from then on is born there. The file is opened by the
// host's root, which is what the kernel checks. It is nil on cgroup v2.
func (c *cgroup) cmdsTasks() (*os.File, error) {
	if c.v1 == nil {
		return nil, nil
	}
	return os.OpenFile(filepath.Join(c.cmdsDir(), "tasks"), os.O_WRONLY|unix.O_CLOEXEC, 0)
}

func (p cgroupPaths) v1Path() cgroup1.Path {
	return func(name cgroup1.Name) (string, error) {
		if path, ok := p.V1[name]; ok {
			return path, nil
		}
		return "", cgroup1.ErrControllerNotActive
	}
}

// loadCgroup finds the cgroups recorded in paths. It reports
// os.ErrNotExist when they are gone.
func loadCgroup(p cgroupPaths) (*cgroup, error) {
	if p.V2 != "" {
		m, err := cgroup2.Load(p.V2)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(cgroupRoot, p.V2)); err != nil {
			return nil, err
		}
		return &cgroup{paths: p, v2: m}, nil
	}
	cg, err := cgroup1.Load(p.v1Path(), cgroup1.WithHierarchy(v1Hierarchy))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil, os.ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	return &cgroup{paths: p, v1: cg}, nil
}

func v1Resources(res provider.Resources) *specs.LinuxResources {
	r := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &res.Memory},
		Pids:   &specs.LinuxPids{Limit: &res.Pids},
	}
	if res.CPU > 0 {
		period := uint64(100_000)
		quota := int64(res.CPU * float64(period))
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	return r
}

func v2Resources(res provider.Resources) *cgroup2.Resources {
	r := &cgroup2.Resources{
		Memory: &cgroup2.Memory{Max: &res.Memory},
		Pids:   &cgroup2.Pids{Max: res.Pids},
	}
	if res.CPU > 0 {
		period := uint64(100_000)
		quota := int64(res.CPU * float64(period))
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)}
	}
	return r
}

func (c *cgroup) add(pid int) error {
	if c.v2 != nil {
		return c.v2.AddProc(uint64(pid))
	}
	return c.v1.Add(cgroup1.Process{Pid: pid})
}

func (c *cgroup) thaw() error {
	if c.v2 != nil {
		return c.v2.Thaw()
	}
	return c.v1.Thaw()
}

func (c *cgroup) frozen() (bool, error) { return c.paths.frozen() }

// frozen reads the freezer's state directly: it is on the path of every
// operation, so it must be one small read (readSmall). It reports
// fs.ErrNotExist when the cgroups are gone.
func (p cgroupPaths) frozen() (bool, error) {
	var buf [64]byte // "1\n", or "FROZEN\n", "FREEZING\n", "THAWED\n"
	if p.V2 != "" {
		b, err := readSmall(filepath.Join(cgroupRoot, p.V2, "cgroup.freeze"), buf[:])
		return strings.TrimSpace(string(b)) == "1", err
	}
	b, err := readSmall(filepath.Join(cgroupRoot, string(cgroup1.Freezer), p.V1[cgroup1.Freezer], "freezer.state"), buf[:])
	return err == nil && !strings.EqualFold(strings.TrimSpace(string(b)), string(cgroup1.Thawed)), err
}

// readSmall reads a file of at most len(buf) bytes in three system
// calls (open, read, close), where os.ReadFile takes six (it also
// stats the file, tries the poller and reads again for the end).
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return buf[:n], nil
}

// oomFile opens the file whose oom_kill line counts the kernel's
// out-of-memory kills in the sandbox. On v1 a kill is counted in the
// victim's cgroup alone, and only commands can be victims: the daemon's
// oom_score_adj is -1000.
func (c *cgroup) oomFile() (*os.File, error) {
	if c.v2 != nil {
		return os.Open(filepath.Join(cgroupRoot, c.paths.V2, "memory.events"))
	}
	return os.Open(filepath.Join(c.cmdsDir(), "memory.oom_control"))
}

// pids lists the processes in the sandbox's cgroups.
func (c *cgroup) pids() ([]int, error) {
	var pids []int
	if c.v2 != nil {
		ps, err := c.v2.Procs(true)
		for _, p := range ps {
			pids = append(pids, int(p))
		}
		return pids, err
	}
	ps, err := c.v1.Processes(cgroup1.Pids, true)
	for _, p := range ps {
		pids = append(pids, p.Pid)
	}
	return pids, err
}

// destroy kills every process left in the cgroups, waits for them to
// go, and removes the cgroups.
func (c *cgroup) destroy(ctx context.Context) error {
	if frozen, _ := c.frozen(); frozen {
		// Frozen processes cannot die; thaw them with SIGKILL pending.
		_ = c.thaw()
	}
	for {
		pids, err := c.pids()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes still in the sandbox's cgroup: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	if c.v2 != nil {
		return c.v2.Delete()
	}
	if err := os.Remove(c.cmdsDir()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove commands' cgroup: %w", err)
	}
	return c.v1.Delete()
}

// update sets the limits of a sandbox on cgroups made with others.
func (c *cgroup) update(res provider.Resources, cmdsMemory int64) error {
	if c.v2 != nil {
		return c.v2.Update(v2Resources(res))
	}
	if err := c.v1.Update(v1Resources(res)); err != nil {
		return err
	}
	return c.setCommandMemory(cmdsMemory)
}

// sweepStaleCgroups removes the sandbox cgroups below berth's own that
// hold no process: those of sandboxes whose daemon died while no provider
// looked after their state directory (a process SIGKILLed with its warm
// pool, a state directory deleted). They are shared by every state
// directory on the host, and a cgroup being set up is empty for a few
// milliseconds, so only those empty both now and after settle go. (Their
// timestamps cannot tell: cgroupfs moves them when they are read.)
func sweepStaleCgroups(ctx context.Context, log *slog.Logger, settle time.Duration) {
	paths, err := pathsFor("x")
	if err != nil {
		return
	}
	var parents []string
	if paths.V2 != "" {
		parents = append(parents, filepath.Dir(filepath.Join(cgroupRoot, paths.V2)))
	}
	for name, p := range paths.V1 {
		parents = append(parents, filepath.Dir(filepath.Join(cgroupRoot, string(name), p)))
	}
	var empty []string
	for _, parent := range parents {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if dir := filepath.Join(parent, e.Name()); e.IsDir() && emptyCgroup(dir) {
				empty = append(empty, dir)
			}
		}
	}
	if len(empty) == 0 {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(settle):
	}
	removed := 0
	for _, dir := range empty {
		if !emptyCgroup(dir) {
			continue
		}
		_ = os.Remove(filepath.Join(dir, cmdsCgroup))
		if os.Remove(dir) == nil {
			removed++
		}
	}
	if removed > 0 {
		log.Info("removed stale sandbox cgroups", "count", removed)
	}
}

// emptyCgroup reports whether a cgroup directory holds no process and
// has no child but an empty commands' cgroup.
func emptyCgroup(dir string) bool {
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil || len(bytes.TrimSpace(procs)) > 0 {
		return false
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() && (e.Name() != cmdsCgroup || !emptyCgroup(filepath.Join(dir, e.Name()))) {
			return false
		}
	}
	return true
}
