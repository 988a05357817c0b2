package remotefake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/errdefs"
)

// DefaultImage is the image of a farm's machines unless Options says
// otherwise; testdata/build-image.sh builds it.
const DefaultImage = "berth-remote-test:1"

// FarmLabel is the key of the label whose value is Options.Label, which
// every container of a farm carries.
const FarmLabel = "berth.remotefake.farm"

// The other labels every container of a farm carries.
const (
	labelOwner   = "berth.remotefake.owner"    // "<pidns inode>:<pid>:<start time>" of the farm's process
	labelMachine = "berth.remotefake.id"       // the machine's id
	labelFarmID  = "berth.remotefake.instance" // random, one farm's
)

// WorkspaceSize bounds what a machine's /workspace holds, a tmpfs: a
// hosted machine's disk is bounded too.
const WorkspaceSize = 2 << 30

// maxID bounds a machine's id, which comes from a fake's clients.
const maxID = 256

// Options configures a Farm.
type Options struct {
	// Image is the machines' image; empty means DefaultImage.
	Image string
	// Label is a value every container of the farm carries (a test
	// run's), so that its leftovers can be found; empty means a random
	// one.
	Label string
	// Logger receives what the farm does; nil means slog.Default().
	Logger *slog.Logger
}

// Farm makes machines, each a container on the local Docker engine. Its
// methods are safe for concurrent use.
type Farm struct {
	docker *client.Client
	image  string
	label  string
	owner  string
	inst   string
	log    *slog.Logger

	mu       sync.Mutex
	machines map[string]*Machine
	closed   bool
}

// NewFarm connects to the local Docker engine and checks that the image
// is there. It removes the containers that farms of exited processes
// left behind.
func NewFarm(ctx context.Context, opts Options) (*Farm, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: remotefake: a farm must run as root (it enters its machines' namespaces)", errdefs.ErrUnsupported)
	}
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	if opts.Label == "" {
		opts.Label = "remotefake-" + randomHex(6)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	owner, err := selfOwner()
	if err != nil {
		return nil, fmt.Errorf("remotefake: %w", err)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("%w: remotefake: %v", errdefs.ErrBadInput, oneLine(err))
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: remotefake: the Docker engine does not answer: %v", errdefs.ErrUnsupported, oneLine(err))
	}
	if _, err := cli.ImageInspect(pctx, opts.Image); err != nil {
		cli.Close()
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: remotefake: no image %s (build it with provider/remote/remotefake/testdata/build-image.sh)", errdefs.ErrNotFound, opts.Image)
		}
		return nil, fmt.Errorf("remotefake: inspect image %s: %v", opts.Image, oneLine(err))
	}
	f := &Farm{docker: cli, image: opts.Image, label: opts.Label, owner: owner, inst: randomHex(8), log: opts.Logger, machines: map[string]*Machine{}}
	f.sweep(pctx)
	return f, nil
}

// Label is the value every container of the farm carries.
func (f *Farm) Label() string { return f.label }

// MachineOptions configures a machine that CreateWith makes.
type MachineOptions struct {
	// Env is the base environment of its commands.
	Env map[string]string
	// UserName names its unprivileged user, whose home is
	// /home/<UserName>; empty means UserName ("user"). Services differ
	// in it: E2B's is "user", Daytona's "daytona".
	UserName string
}

// Create makes a new running machine. id is the fake service's id for
// it, unique in the farm; env is the base environment of its commands.
func (f *Farm) Create(ctx context.Context, id string, env map[string]string) (*Machine, error) {
	return f.CreateWith(ctx, id, MachineOptions{Env: env})
}

// CreateWith is Create with the options of a service's machines.
func (f *Farm) CreateWith(ctx context.Context, id string, opts MachineOptions) (*Machine, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if opts.UserName == "" {
		opts.UserName = UserName
	}
	if err := checkUserName(opts.UserName); err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: remotefake: the farm is closed", errdefs.ErrBadInput)
	}
	if _, ok := f.machines[id]; ok {
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: remotefake: machine %q", errdefs.ErrAlreadyExists, id)
	}
	// Reserved while the container is made, so that a concurrent Create
	// of the id fails.
	f.machines[id] = nil
	f.mu.Unlock()
	m, err := f.create(ctx, id, opts)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil || f.closed {
		delete(f.machines, id)
		if err == nil {
			m.Destroy(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("%w: remotefake: the farm is closed", errdefs.ErrBadInput)
		}
		return nil, err
	}
	f.machines[id] = m
	return m, nil
}

func (f *Farm) create(ctx context.Context, id string, opts MachineOptions) (m *Machine, err error) {
	envList, err := envSlice(opts.Env)
	if err != nil {
		return nil, err
	}
	var created client.ContainerCreateResult
	var uid int
	for attempt := 0; ; attempt++ {
		uid, err = f.freeUID(ctx)
		if err != nil {
			return nil, err
		}
		created, err = f.createContainer(ctx, id, envList, uid)
		if err != nil {
			return nil, err
		}
		// Another farm may have picked the uid at once.
		mine, err := f.holdsUID(ctx, created.ID, uid)
		if err == nil && !mine {
			err = fmt.Errorf("remotefake: uid %d is taken", uid)
		}
		if err == nil {
			break
		}
		f.remove(context.WithoutCancel(ctx), created.ID)
		if attempt == 10 {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			f.remove(context.WithoutCancel(ctx), created.ID)
		}
	}()
	if _, err := f.docker.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return nil, fmt.Errorf("remotefake: start container: %v", oneLine(err))
	}
	insp, err := f.docker.ContainerInspect(ctx, created.ID, client.ContainerInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("remotefake: inspect container: %v", oneLine(err))
	}
	if insp.Container.State == nil || insp.Container.State.Pid <= 0 {
		return nil, fmt.Errorf("%w: remotefake: the container of machine %q is not running", errdefs.ErrSandboxLost, id)
	}
	pid := insp.Container.State.Pid
	// The pidfd pins the container's first process, pid 1 in its
	// namespace, so that its pid is not taken for another's later.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: remotefake: the container of machine %q: %v", errdefs.ErrSandboxLost, id, err)
	}
	if nsPID(pid) != 1 {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: remotefake: the container of machine %q has ended", errdefs.ErrSandboxLost, id)
	}
	f.log.Debug("remotefake: machine created", "id", id, "container", created.ID[:12])
	m = &Machine{farm: f, id: id, container: created.ID, pid: pid, uid: uid, initFD: fd, env: maps.Clone(opts.Env), user: opts.UserName}
	if err := m.setUser(ctx); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return m, nil
}

// createContainer makes the container of machine id, its user's uid
// uid.
func (f *Farm) createContainer(ctx context.Context, id string, envList []string, uid int) (client.ContainerCreateResult, error) {
	yes := true
	created, err := f.docker.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: f.image,
			Env:   envList,
			// docker-init as the first process reaps the orphans of
			// the commands; its child keeps the machine up, reading a
			// FIFO it holds open both ways, which so never ends. Not
			// sleep: commands look for their own sleeps.
			Cmd:        []string{"/bin/sh", "-c", "mkfifo -m 0600 /dev/remotefake-idle && read _ <>/dev/remotefake-idle"},
			WorkingDir: "/",
			Labels: map[string]string{FarmLabel: f.label, labelOwner: f.owner, labelMachine: id, labelFarmID: f.inst,
				labelUID: strconv.Itoa(uid)},
		},
		HostConfig: &container.HostConfig{
			NetworkMode: "none",
			Init:        &yes,
			// As a VM's: commands see their cgroup as the root...
			CgroupnsMode: container.CgroupnsModePrivate,
			// ... and what they write is no setuid program nor device,
			// on file systems of bounded size. Docker's /dev/shm is
			// nosuid and nodev already.
			Tmpfs: map[string]string{
				"/tmp":       "rw,exec,nosuid,nodev,size=2g,mode=1777",
				"/workspace": fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=0755,uid=%d,gid=%d", WorkspaceSize, uid, uid),
			},
		},
	})
	if err != nil {
		return created, fmt.Errorf("remotefake: create container: %v", oneLine(err))
	}
	return created, nil
}

// Machine returns the machine of id, or an error wrapping
// errdefs.ErrNotFound.
func (f *Farm) Machine(id string) (*Machine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.machines[id]
	if m == nil {
		return nil, fmt.Errorf("%w: remotefake: machine %q", errdefs.ErrNotFound, clip(id))
	}
	return m, nil
}

// Machines lists the farm's machines.
func (f *Farm) Machines() []*Machine {
	f.mu.Lock()
	defer f.mu.Unlock()
	ms := make([]*Machine, 0, len(f.machines))
	for _, m := range f.machines {
		if m != nil {
			ms = append(ms, m)
		}
	}
	return ms
}

// Close destroys every machine of the farm, and any container that a
// Create cut short left.
func (f *Farm) Close() error {
	f.mu.Lock()
	f.closed = true
	ms := make([]*Machine, 0, len(f.machines))
	for _, m := range f.machines {
		if m != nil {
			ms = append(ms, m)
		}
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Destroy(ctx); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := f.removeLabelled(ctx, labelFarmID+"="+f.inst, nil); err != nil {
		errs = append(errs, err)
	}
	f.docker.Close()
	return errors.Join(errs...)
}

func (f *Farm) forget(m *Machine) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.machines[m.id] == m {
		delete(f.machines, m.id)
	}
}

// remove removes a container and its volumes, whatever its state.
func (f *Farm) remove(ctx context.Context, id string) error {
	_, err := f.docker.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	if !strings.Contains(err.Error(), "already in progress") {
		return fmt.Errorf("remotefake: remove container: %v", oneLine(err))
	}
	// Another farm (sweeping) removes it: wait until it is gone.
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		if _, err := f.docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remotefake: remove container: %v", ctx.Err())
		case <-time.After(delay):
		}
	}
}

// removeLabelled removes the containers that carry filter (key=value)
// and that keep says to remove (nil: all).
func (f *Farm) removeLabelled(ctx context.Context, filter string, keep func(labels map[string]string) bool) error {
	list, err := f.docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", filter)})
	if err != nil {
		return fmt.Errorf("remotefake: list containers: %v", oneLine(err))
	}
	var errs []error
	for _, c := range list.Items {
		if keep != nil && keep(c.Labels) {
			continue
		}
		if err := f.remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sweep removes the containers of farms whose process, in this pid
// namespace, has exited. Owners in other pid namespaces cannot be told
// from here and are left alone.
func (f *Farm) sweep(ctx context.Context) {
	ns, _, _ := strings.Cut(f.owner, ":")
	n := 0
	err := f.removeLabelled(ctx, labelOwner, func(labels map[string]string) bool {
		owner := labels[labelOwner]
		ons, rest, ok := strings.Cut(owner, ":")
		if !ok || ons != ns {
			return true
		}
		pid, start, ok := strings.Cut(rest, ":")
		p, err := strconv.Atoi(pid)
		if !ok || err != nil {
			return true
		}
		if s, err := startTime(p); err == nil && s == start {
			return true
		}
		n++
		return false
	})
	if err != nil {
		f.log.Warn("remotefake: removing leftovers", "err", err)
	} else if n > 0 {
		f.log.Info("remotefake: removed the machines of exited farms", "count", n)
	}
}

// selfOwner is this process's owner label.
func selfOwner() (string, error) {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return "", err
	}
	start, err := startTime(os.Getpid())
	if err != nil {
		return "", err
	}
	return strings.Trim(strings.TrimPrefix(ns, "pid:"), "[]") + ":" + strconv.Itoa(os.Getpid()) + ":" + start, nil
}

// startTime is field 22 of /proc/<pid>/stat, which tells a process from
// a later one with its pid.
func startTime(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", fmt.Errorf("bad /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return fields[19], nil
}

func checkID(id string) error {
	if id == "" || len(id) > maxID {
		return fmt.Errorf("%w: remotefake: a machine's id must have 1 to %d bytes", errdefs.ErrBadInput, maxID)
	}
	for _, r := range id {
		if r < 0x21 || r > 0x7e {
			return fmt.Errorf("%w: remotefake: a machine's id must be printable ASCII", errdefs.ErrBadInput)
		}
	}
	return nil
}

func envSlice(env map[string]string) ([]string, error) {
	s := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%w: remotefake: bad environment variable %q", errdefs.ErrBadInput, clip(k))
		}
		s = append(s, k+"="+v)
	}
	return s, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// oneLine keeps the first line of an engine's error.
func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// clip bounds a client's string in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
