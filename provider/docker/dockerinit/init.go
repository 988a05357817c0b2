// Package dockerinit is berth's daemon as the first process of a Docker
// sandbox: the container's entrypoint is berth-sandboxd, bind-mounted
// read-only from the host, which calls [Main]. It serves [sandboxd] on
// a unix socket in a directory the host bind-mounts in and only root
// can reach, and waits on a second socket there to be claimed by a
// sandbox: told its commands' environment, working directory, process
// limit and end of life. The container is isolated by Docker; the
// daemon adds to it the seccomp filter and Landlock rules of the linux
// provider's daemon, stacked on Docker's own profile, before it serves.
//
// It links no Docker client: it runs inside the sandbox.
package dockerinit

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/berth-dev/berth/provider/internal/cabundle"
	"github.com/berth-dev/berth/provider/internal/warmclaim"
	"github.com/berth-dev/berth/provider/linux/linuxinit"
	"github.com/berth-dev/berth/sandboxd"
)

// Arg is the first argument the provider starts the daemon with; Main
// looks for it.
const Arg = "docker-init"

// Paths inside the container.
const (
	// RunDir holds the sockets. The host bind-mounts it from the
	// sandbox's state directory; it is mode 0700, root's.
	RunDir        = "/run/berth"
	SocketName    = "sandboxd.sock" // sandboxd's API
	ControlSocket = "control.sock"  // the claim
	// ConfigEnv names the environment variable that carries Config.
	ConfigEnv = "BERTH_DOCKER_INIT"
)

// Config is what the daemon needs from its start.
type Config struct {
	// UID and GID are the sandbox user's, on the host as in the sandbox:
	// containers share the host's ids.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// ProxyCA, if not empty, is the egress proxy's authority (PEM),
	// which the daemon installs in cabundle.Dir (a tmpfs the host
	// mounts there) for the sandbox to trust. It is public.
	ProxyCA string `json:"proxy_ca,omitempty"`
}

// Claim is what the host tells a daemon when a sandbox takes it.
type Claim = warmclaim.Claim

// ClaimPath is the control socket's only route.
const ClaimPath = warmclaim.Path

// Main runs the daemon when this process was started as a Docker
// sandbox's entrypoint, and then never returns. Otherwise it returns at
// once.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != Arg {
		return
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "berth-sandboxd: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func run() error {
	debug.SetGCPercent(50) // see the linux provider's daemon
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(ConfigEnv)), &cfg); err != nil {
		return fmt.Errorf("read %s: %w", ConfigEnv, err)
	}
	if cfg.UID <= 0 || cfg.GID <= 0 {
		return fmt.Errorf("%s: the sandbox user must not be root", ConfigEnv)
	}
	base := baseEnv()
	ln, err := warmclaim.Listen(RunDir + "/" + SocketName)
	if err != nil {
		return err
	}
	ctl, err := warmclaim.Listen(RunDir + "/" + ControlSocket)
	if err != nil {
		return err
	}
	if cfg.ProxyCA != "" {
		if err := cabundle.Install(cfg.ProxyCA); err != nil {
			return fmt.Errorf("%s: %w", cabundle.Dir, err)
		}
	}
	if err := linuxinit.Confine(); err != nil {
		return fmt.Errorf("confine: %w", err)
	}
	guard := newMemoryGuard(cfg.UID)
	oom := oomCounter(guard)
	srv, err := sandboxd.New(sandboxd.Config{
		Workspace: "/workspace",
		UID:       cfg.UID,
		GID:       cfg.GID,
		Deferred:  true,
		// The kernel's out-of-memory killer picks commands first.
		CommandOOMScoreAdj: 1000,
		OOMKills:           oom,
	})
	if err != nil {
		return err
	}
	if guard != nil {
		go guard.run()
	}
	if err := srv.WarmUp("/bin/true"); err != nil {
		fmt.Fprintf(os.Stderr, "warm-up command: %v\n", err) // the image may have no /bin/true
	}
	return warmclaim.Serve(srv, ln, ctl, func(c Claim) error {
		// The daemon is the host's root; the sandbox user has an id of
		// its own on the host, so the process count is the sandbox's.
		env := maps.Clone(base)
		maps.Copy(env, c.Env)
		return warmclaim.Apply(srv, c, env)
	})
}

// baseEnv is the image's environment, which Docker gave the daemon,
// without the daemon's own configuration, and with a PATH if the image
// has none.
func baseEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if k != ConfigEnv && k != "HOSTNAME" {
			env[k] = v
		}
	}
	os.Unsetenv(ConfigEnv)
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" // Docker's default
	}
	return env
}

// oomCounter reads the container's count of out-of-memory kills from its
// memory cgroup, which Docker mounts read-only at /sys/fs/cgroup in the
// container's own cgroup namespace: memory.events on cgroup v2,
// memory.oom_control on v1; to which it adds the kills of the memory
// guard.
func oomCounter(guard *memoryGuard) func() (int64, error) {
	for _, c := range []struct{ path, key string }{
		{"/sys/fs/cgroup/memory.events", "oom_kill"},
		{"/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"},
	} {
		f, err := os.Open(c.path)
		if err != nil {
			continue
		}
		var mu sync.Mutex
		return func() (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			b := make([]byte, 4096)
			n, err := f.ReadAt(b, 0)
			if err != nil && err != io.EOF {
				return 0, err
			}
			for line := range strings.Lines(string(b[:n])) {
				if v, ok := strings.CutPrefix(line, c.key+" "); ok {
					n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					return n + guard.count(), err
				}
			}
			return 0, fmt.Errorf("no %s in %s", c.key, c.path)
		}
	}
	return nil
}
