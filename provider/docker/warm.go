package docker

import (
	"github.com/berth-dev/berth/internal/randid"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/docker/dockerinit"
	"github.com/berth-dev/berth/provider/internal/cabundle"
	"github.com/berth-dev/berth/provider/internal/hostsock"
	"github.com/berth-dev/berth/provider/internal/warmclaim"
	"github.com/berth-dev/berth/sandboxd"
)

const (
	socketName  = dockerinit.SocketName
	daemonPath  = "/.berth/berth-sandboxd" // in the container
	sandboxName = "sandbox"                // the sandbox user's name
)

// daemonUID is the daemon's uid, on the host as in the container: the
// owner of its sockets. The host dials them with hostsock, which refuses
// anything else at their names (the run directory is the container's
// /run/berth, which its root can write).
const daemonUID = 0

// startTimeout bounds how long a container's daemon may take to serve.
const startTimeout = 30 * time.Second

// daemonCaps are all the capabilities the daemon keeps: to run commands
// as the sandbox user and act on files as them (SETUID, SETGID), to kill
// commands that outlive their timeout (KILL: they are another user's),
// and to make commands, not itself, the out-of-memory killer's choice
// (DAC_OVERRIDE: their /proc files are theirs). Commands, another user
// under no_new_privs, have none.
var daemonCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_DAC_OVERRIDE"}

// warm is a started container whose daemon serves and waits to be
// claimed.
type warm struct {
	container string
	uid       int
	freezer   string
	client    *sandboxd.Client
	control   *http.Client
}

// claim tells the daemon the sandbox's configuration.
func (w *warm) claim(ctx context.Context, c dockerinit.Claim) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := warmclaim.Send(ctx, w.control, c); err != nil {
		return fmt.Errorf("claim daemon: %w", err)
	}
	w.control.CloseIdleConnections()
	return nil
}

func claimMsg(env map[string]string, dir string, expires time.Time, lease time.Duration, nproc int64) dockerinit.Claim {
	return dockerinit.Claim{Env: env, Dir: dir, ExpiresAt: expires, Lease: lease, UserProcesses: nproc}
}

// startWarm makes and starts a container of image with limits res, and
// waits until its daemon serves.
func (p *Provider) startWarm(ctx context.Context, image string, res provider.Resources, bridged bool) (w *warm, err error) {
	img, err := p.docker.ImageInspect(ctx, image)
	if err != nil {
		return nil, fmt.Errorf("inspect image %.200q: %v", image, oneLine(err))
	}
	var volumes []string
	if img.Config != nil {
		for v := range img.Config.Volumes {
			volumes = append(volumes, v)
		}
	}
	if err := checkVolumes(image, volumes); err != nil {
		return nil, err
	}
	uid, err := p.reserveSlot()
	if err != nil {
		return nil, err
	}
	dir := p.slotPath(uid)
	var id string
	defer func() {
		if err != nil {
			p.removeSlot(context.WithoutCancel(ctx), id, uid)
		}
	}()
	for _, d := range []string{runDir, workspaceDir} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	// Formatting and mounting the workspace overlaps with the
	// container's creation, which does not need it yet.
	formatted := make(chan error, 1)
	go func() { formatted <- makeWorkspace(dir, res.Disk, uid, uid) }()
	defer func() {
		if formatted != nil {
			<-formatted
		}
	}()
	if err := writeUsers(dir, uid); err != nil {
		return nil, err
	}
	if p.net != nil {
		if err := os.WriteFile(filepath.Join(dir, resolvConf), []byte(p.net.ResolvConf()), 0o644); err != nil {
			return nil, err
		}
	}
	hc := p.hostConfig(dir, res, bridged)
	// The image's volumes would be Docker volumes, on the host's disk
	// and bounded by nothing (but for Landlock, which keeps commands
	// from writing anywhere but /workspace, /tmp and /dev, where the
	// kernel has it): each is a tmpfs like /tmp instead.
	for _, v := range volumes {
		if v = path.Clean(v); hc.Tmpfs[v] == "" && v != provider.Workspace {
			hc.Tmpfs[v] = hc.Tmpfs["/tmp"]
		}
	}
	created, err := p.docker.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       "berth-" + strconv.Itoa(uid) + "-" + randid.Hex(3),
		Config:     p.containerConfig(image, uid),
		HostConfig: hc,
	})
	if err != nil {
		return nil, fmt.Errorf("create container: %v", oneLine(err))
	}
	id = created.ID
	err = <-formatted
	formatted = nil
	if err != nil {
		return nil, err
	}
	if _, err := p.docker.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return nil, fmt.Errorf("start container: %v", oneLine(err))
	}
	w = &warm{container: id, uid: uid}
	run := filepath.Join(dir, runDir)
	w.client = sandboxd.NewClient(hostsock.Dialer(filepath.Join(run, socketName), daemonUID))
	ctl := filepath.Join(run, dockerinit.ControlSocket)
	w.control = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return hostsock.Dial(ctx, ctl, daemonUID) },
	}}
	if err := p.waitServing(ctx, w); err != nil {
		return nil, err
	}
	return w, nil
}

// waitServing waits until a container's daemon answers, and finds its
// freezer.
func (p *Provider) waitServing(ctx context.Context, w *warm) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		_, err := w.client.Health(hctx)
		hcancel()
		if err == nil {
			break
		}
		insp, ierr := p.docker.ContainerInspect(ctx, w.container, client.ContainerInspectOptions{})
		if ierr == nil && !insp.Container.State.Running {
			return fmt.Errorf("the container's daemon exited (code %d): %s", insp.Container.State.ExitCode, p.logs(w.container))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the container's daemon does not answer: %v; %s", err, p.logs(w.container))
		case <-time.After(delay):
		}
	}
	insp, err := p.docker.ContainerInspect(ctx, w.container, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("inspect container: %v", oneLine(err))
	}
	w.freezer, err = freezerFile(insp.Container.State.Pid)
	return err
}

// logs is the tail of what a container's daemon printed, for errors.
func (p *Provider) logs(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := p.docker.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "5"})
	if err != nil {
		return "no log: " + oneLine(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 4096))
	// Docker frames each line with an 8-byte header; its bytes are not
	// printable text, and the message stays one line.
	b = bytes.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, b)
	return "daemon log: " + string(bytes.TrimSpace(b))
}

// mounted are the paths berth mounts in every container. An image's
// VOLUME may name /workspace or /tmp (berth's own mount wins there), but
// no other of them, nor any path below one.
var mounted = []string{daemonPath, dockerinit.RunDir, provider.Workspace, "/tmp", "/dev/shm", "/etc/passwd", "/etc/group", "/etc/resolv.conf"}

// checkVolumes refuses an image that declares a VOLUME over a path berth
// mounts: Docker would mount the volume over berth's daemon or its
// sockets, and the sandbox would never serve.
func checkVolumes(image string, volumes []string) error {
	for _, v := range volumes {
		v = path.Clean("/" + v)
		for _, m := range mounted {
			if (v == m && m != provider.Workspace && m != "/tmp") || strings.HasPrefix(v, m+"/") {
				return fmt.Errorf("%w: image %.200q declares VOLUME %.200q, over %s, which berth mounts: remove it from the image", errdefs.ErrBadInput, image, v, m)
			}
		}
	}
	return nil
}

// reserveSlot picks a free host uid for a sandbox user and makes its
// slot directory, whose mkdir is the reservation.
func (p *Provider) reserveSlot() (int, error) {
	for range 100 {
		uid := p.cfg.UIDBase + rand.IntN(p.cfg.UIDCount)
		err := os.Mkdir(p.slotPath(uid), 0o711)
		if err == nil {
			return uid, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("no free sandbox uid in %d+%d after 100 tries", p.cfg.UIDBase, p.cfg.UIDCount)
}

// writeUsers writes the container's /etc/passwd and /etc/group: root,
// the sandbox user and nobody. They replace the image's, so that the
// sandbox user, whose id is chosen per sandbox, has a name.
func writeUsers(dir string, uid int) error {
	u := strconv.Itoa(uid)
	passwd := "root:x:0:0:root:/root:/bin/sh\n" +
		sandboxName + ":x:" + u + ":" + u + ":sandbox:" + provider.Workspace + ":/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group := "root:x:0:\n" + sandboxName + ":x:" + u + ":\nnogroup:x:65534:\n"
	if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte(passwd), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "group"), []byte(group), 0o644)
}

func (p *Provider) containerConfig(image string, uid int) *container.Config {
	return &container.Config{
		Image: image,
		// No process of the image runs but berth's daemon, which confines
		// itself before it serves and runs commands unprivileged: the
		// image's entrypoint and command are replaced (commands run in
		// the image's environment, which the daemon passes on), and its
		// HEALTHCHECK, which Docker would run as the container's root
		// with none of the daemon's confinement, is turned off.
		Entrypoint:  []string{daemonPath, dockerinit.Arg},
		Cmd:         []string{},
		Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
		User:        "0:0",
		WorkingDir:  "/",
		Hostname:    "sandbox",
		Env:         []string{dockerinit.ConfigEnv + "=" + encode(dockerinit.Config{UID: uid, GID: uid, ProxyCA: p.trustCA()})},
		Labels: map[string]string{
			LabelProvider: Name,
			LabelStateDir: p.cfg.StateDir,
			LabelUID:      strconv.Itoa(uid),
			LabelOwner:    strconv.Itoa(os.Getpid()),
		},
	}
}

// trustCA is the proxy's authority that containers' daemons install
// (dockerinit.Config.ProxyCA), "" for none.
func (p *Provider) trustCA() string {
	if p.net == nil {
		return ""
	}
	return p.cfg.Network.TrustCA()
}

// hostConfig is a container's: of network mode none (policed networks
// are attached to it once it runs, see network.go), or Docker's bridge
// when bridged.
func (p *Provider) hostConfig(dir string, res provider.Resources, bridged bool) *container.HostConfig {
	tmp := int64(float64(res.Memory) * p.cfg.Limits.TmpFraction)
	netMode := container.NetworkMode("none")
	if bridged {
		netMode = "bridge"
	}
	bind := func(src, dst string, ro bool) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: ro,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}
	}
	mounts := []mount.Mount{
		bind(p.cfg.DaemonPath, daemonPath, true),
		bind(filepath.Join(dir, runDir), dockerinit.RunDir, false),
		bind(filepath.Join(dir, workspaceDir), provider.Workspace, false),
		bind(filepath.Join(dir, "passwd"), "/etc/passwd", true),
		bind(filepath.Join(dir, "group"), "/etc/group", true),
	}
	if p.net != nil {
		// Docker writes no resolv.conf of its own where one is mounted:
		// every container, warm ones too (a sandbox of NetworkNone may
		// get a network later), names the DNS stub, never the host's
		// resolvers.
		mounts = append(mounts, bind(filepath.Join(dir, resolvConf), "/etc/resolv.conf", true))
	}
	tmpfs := map[string]string{"/tmp": fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", tmp)}
	if ca := p.trustCA(); ca != "" {
		// The daemon writes the bundles there as it starts (see
		// cabundle.Install); of the image's own /berth, nothing shows.
		tmpfs[cabundle.Dir] = fmt.Sprintf("rw,noexec,nosuid,nodev,size=%d,mode=0755", cabundle.Size(nil, ca)+cabundle.MaxSystemBundle)
	}
	pids := res.Pids
	return &container.HostConfig{
		NetworkMode:    netMode,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		CapAdd:         daemonCaps,
		SecurityOpt:    []string{"no-new-privileges"},
		CgroupnsMode:   container.CgroupnsModePrivate,
		IpcMode:        container.IPCModePrivate,
		// The daemon keeps 0, the engine's own (a lower score needs
		// CAP_SYS_RESOURCE where the engine runs, which some hosts
		// lack), and gives its commands 1000: the out-of-memory killer
		// picks any command before it.
		Tmpfs:     tmpfs,
		ShmSize:   tmp,
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
		Mounts:    mounts,
		Resources: container.Resources{
			Memory:     res.Memory,
			MemorySwap: res.Memory, // no swap
			NanoCPUs:   int64(res.CPU * 1e9),
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: p.cfg.Limits.OpenFiles, Hard: p.cfg.Limits.OpenFiles},
				{Name: "sigpending", Soft: p.cfg.Limits.PendingSignals, Hard: p.cfg.Limits.PendingSignals},
				// POSIX message queues are counted per user like
				// signals, and of no use to a sandbox.
				{Name: "msgqueue", Soft: 0, Hard: 0},
			},
		},
	}
}

// pool keeps warm containers of the default image, so that creating a
// sandbox with the default limits does not wait for Docker. It fills
// itself once a sandbox has been created, never before.
type pool struct {
	p    *Provider
	size int

	mu      sync.Mutex
	ready   []*warm
	filling int
	closed  bool
	wg      sync.WaitGroup
}

func (q *pool) take() *warm {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ready) == 0 {
		return nil
	}
	w := q.ready[0]
	q.ready = q.ready[1:]
	return w
}

// fill starts warm containers until the pool, counting those starting,
// holds size.
func (q *pool) fill(image string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.closed && len(q.ready)+q.filling < q.size {
		q.filling++
		q.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
			defer cancel()
			w, err := q.p.startWarm(ctx, image, q.p.resources(provider.Resources{}), false)
			q.mu.Lock()
			defer q.mu.Unlock()
			q.filling--
			if err != nil {
				q.p.log.Warn("start a warm container", "err", err)
				return
			}
			if q.closed {
				q.wg.Go(func() { q.p.removeSlot(context.Background(), w.container, w.uid) })
				return
			}
			q.ready = append(q.ready, w)
		})
	}
}

func (q *pool) close() {
	q.mu.Lock()
	q.closed = true
	ready := q.ready
	q.ready = nil
	q.mu.Unlock()
	for _, w := range ready {
		q.wg.Go(func() { q.p.removeSlot(context.Background(), w.container, w.uid) })
	}
	q.wg.Wait()
}

// sweepWarm removes what creators that died left behind: warm
// containers of this state directory whose process is gone (never
// claimed, they belong to nobody), and slots that neither a container
// nor a record names (a creator killed between reserving a slot and
// making its container). Slots younger than a minute may be another
// process's creation in progress, and are left alone.
func (p *Provider) sweepWarm(ctx context.Context) {
	list, err := p.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelStateDir+"="+p.cfg.StateDir)})
	if err != nil {
		p.log.Warn("list containers", "err", oneLine(err))
		return
	}
	claimed := map[string]bool{}
	named := map[int]bool{} // slots in use
	entries, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, sandboxesDir))
	for _, e := range entries {
		var rec record
		if b, err := os.ReadFile(filepath.Join(p.cfg.StateDir, sandboxesDir, e.Name())); err == nil && json.Unmarshal(b, &rec) == nil {
			claimed[rec.Container] = true
			named[rec.UID] = true
		}
	}
	for _, c := range list.Items {
		owner, _ := strconv.Atoi(c.Labels[LabelOwner])
		uid, err := strconv.Atoi(c.Labels[LabelUID])
		if err != nil {
			continue
		}
		if claimed[c.ID] || owner <= 0 || processAlive(owner) {
			named[uid] = true
			continue
		}
		if err := p.removeSlot(ctx, c.ID, uid); err != nil {
			p.log.Warn("remove a stale warm container", "container", c.ID, "err", err)
		}
	}
	slots, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, slotsDir))
	for _, e := range slots {
		uid, err := strconv.Atoi(e.Name())
		fi, ierr := e.Info()
		if err != nil || ierr != nil || named[uid] || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		if err := p.removeSlot(ctx, "", uid); err != nil {
			p.log.Warn("remove a stale slot", "uid", uid, "err", err)
		}
	}
}

func processAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}
