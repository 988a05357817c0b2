// Package remoteinit is berth's daemon in a machine of a hosted sandbox
// service: the remote provider uploads berth-sandboxd into the machine
// and starts it, detached, as
//
//	berth-sandboxd serve --listen :PORT
//
// with its configuration in the environment variable [ConfigEnv], which
// it unsets, and clears from /proc/self/environ, before anything else, so
// that no command it runs sees it and the bearer token is never in its
// argv. It serves [sandboxd] on the TCP
// port, which the service forwards, and refuses every request without
// the token. It runs commands as the sandbox user, named in the
// machine's /etc/passwd (the templates' "user" has whatever uid the
// service gives it) or given as UID:GID, switching to it when it runs
// as root, and ends every process of the sandbox, and itself,
// when the sandbox's lifetime has passed: a service whose machines have
// a time limit of their own ends them at it too, one without it relies
// on this. Commands may open sockets of the families berth's other
// sandboxes allow (unix, inet, inet6, netlink) and no other, and gain no
// privilege: no setuid program works for them.
//
// It links only sandboxd and the standard library: it runs inside the
// machine.
package remoteinit

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/sandboxd"
)

// Arg is the subcommand the provider starts the daemon with.
const Arg = "serve"

// ConfigEnv names the environment variable that carries Config, as JSON.
const ConfigEnv = "BERTH_SANDBOXD_CONFIG"

// DefaultWorkspace is the workspace of a Config that names none.
const DefaultWorkspace = "/workspace"

// Config is what the daemon needs from its start.
type Config struct {

	// Token is the bearer token every request must carry.
	Token string `json:"token"`
	// Workspace is the directory commands work in and files are
	// confined to; empty means DefaultWorkspace. It is made, owned by
	// the sandbox user, if it is not there.
	Workspace string `json:"workspace,omitempty"`
	// User is the sandbox user, a name in the machine's /etc/passwd or
	// "UID:GID": commands run as it and files are its. Empty means
	// DefaultUser. A daemon that is not root must run as it.
	User string `json:"user,omitempty"`
	// Env is added to the machine's environment for every command; Dir
	// is their default working directory, a workspace path.
	Env map[string]string `json:"env,omitempty"`
	Dir string            `json:"dir,omitempty"`
	// Lease is Spec.Lease: see sandboxd.Server.SetLease.
	Lease time.Duration `json:"lease,omitempty"`
	// ExpiresAt ends the sandbox; zero means never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// EndMachine: at ExpiresAt, the daemon also asks the machine's first
	// process to end (SIGTERM), and with it the machine, for a service
	// whose machines have no time limit of their own.
	EndMachine bool `json:"end_machine,omitempty"`
}

// config is a checked Config, its user resolved.
type config struct {
	Config
	uid, gid int
}

// MaxOpenFiles is every command's limit of open files (RLIMIT_NOFILE):
// the kernel's file table is the machine's, shared by all.
const MaxOpenFiles = 1 << 14

// Main runs the daemon when this process was started with Arg, and then
// never returns. Otherwise it returns at once.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != Arg {
		return
	}
	if err := run(os.Args[2:], os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "berth-sandboxd serve: %s\n", oneLine(err.Error()))
		os.Exit(1)
	}
	os.Exit(0)
}

func run(args []string, stderr io.Writer) error {
	// The configuration goes first: nothing this process starts, even
	// after a failure below, inherits the token.
	raw, hadConfig := os.LookupEnv(ConfigEnv)
	os.Unsetenv(ConfigEnv)
	if err := scrubEnviron(ConfigEnv); err != nil {
		fmt.Fprintf(stderr, "berth-sandboxd serve: clearing $%s from /proc/self/environ: %v\n", ConfigEnv, err)
	}
	// A daemon started in the background of a shell (a service's
	// session, nohup ... &) has SIGINT and SIGQUIT ignored, which every
	// command would inherit, so that Ctrl-C could not stop one. Handled
	// here, they are back to their defaults in each command at its exec.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGQUIT)
	fl := flag.NewFlagSet("berth-sandboxd serve", flag.ContinueOnError)
	fl.SetOutput(stderr)
	listen := fl.String("listen", "", "the TCP address to serve on (:PORT)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *listen == "" || fl.NArg() != 0 {
		return errors.New("usage: berth-sandboxd serve --listen :PORT, with its configuration in $" + ConfigEnv)
	}
	if !hadConfig {
		return fmt.Errorf("no $%s", ConfigEnv)
	}
	cfg, err := parseConfig(raw, passwdFile)
	if err != nil {
		return err
	}
	debug.SetGCPercent(50) // as the other providers' daemons: an idle sandbox costs little
	// Processes a command leaves behind, orphaned, become the daemon's
	// and not the machine's first process's: so a command's timeout,
	// the lease's stop and the lifetime's end reach them as descendants.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become the subreaper of commands: %w", err)
	}
	if err := limitOpenFiles(); err != nil {
		return err
	}
	if err := confine(); err != nil {
		return err
	}
	if err := makeWorkspace(cfg); err != nil {
		return err
	}
	env := baseEnv()
	maps.Copy(env, cfg.Env)
	srv, err := sandboxd.New(sandboxd.Config{
		Workspace: cfg.Workspace,
		UID:       cfg.uid,
		GID:       cfg.gid,
		Env:       env,
		Dir:       cfg.Dir,
		Token:     cfg.Token,
		// The kernel's out-of-memory killer picks commands first.
		CommandOOMScoreAdj: 1000,
		// Commands see their cgroups as the root, not the machine's
		// layout, where the daemon may make them a namespace.
		CgroupNamespace: hasCap(unix.CAP_SYS_ADMIN),
	})
	if err != nil {
		return err
	}
	srv.SetLease(cfg.Lease)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if !cfg.ExpiresAt.IsZero() {
		time.AfterFunc(time.Until(cfg.ExpiresAt), func() {
			endSandbox(cfg.uid)
			if cfg.EndMachine && os.Getpid() != 1 {
				// The kernel delivers to a namespace's first process only
				// the signals it handles or blocks: an init (tini,
				// systemd) ends on SIGTERM.
				_ = syscall.Kill(1, syscall.SIGTERM)
			}
			os.Exit(0)
		})
	}
	return srv.Serve(ln)
}

// limitOpenFiles lowers the daemon's limit of open files, which its
// commands inherit, to MaxOpenFiles.
func limitOpenFiles() error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	lim.Cur, lim.Max = min(lim.Cur, MaxOpenFiles), min(lim.Max, MaxOpenFiles)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("limit open files: %w", err)
	}
	return nil
}

// hasCap reports whether the daemon holds capability c, in its
// effective set.
func hasCap(c uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<c) != 0
		}
	}
	return false
}

// parseConfig reads and checks the configuration.
// User names resolve in passwd, the machine's /etc/passwd.
func parseConfig(raw, passwd string) (config, error) {
	var cfg config
	if err := json.Unmarshal([]byte(raw), &cfg.Config); err != nil {
		// json's message may quote the input, and the input holds the
		// token.
		return cfg, fmt.Errorf("$%s is not a configuration in JSON", ConfigEnv)
	}
	if cfg.Token == "" {
		return cfg, fmt.Errorf("$%s: no token", ConfigEnv)
	}
	if cfg.Workspace == "" {
		cfg.Workspace = DefaultWorkspace
	}
	if !strings.HasPrefix(cfg.Workspace, "/") {
		return cfg, fmt.Errorf("$%s: the workspace %q is not an absolute path", ConfigEnv, cfg.Workspace)
	}
	if cfg.User == "" {
		cfg.User = DefaultUser
	}
	var err error
	if cfg.uid, cfg.gid, err = lookupUser(cfg.User, passwd); err != nil {
		return cfg, fmt.Errorf("$%s: %w", ConfigEnv, err)
	}
	if euid := os.Geteuid(); euid != 0 && (cfg.uid != euid || cfg.gid != os.Getegid()) {
		return cfg, fmt.Errorf("$%s: the daemon runs as uid %d, not root, so it cannot run commands as %d:%d", ConfigEnv, euid, cfg.uid, cfg.gid)
	}
	if cfg.Lease < 0 {
		return cfg, fmt.Errorf("$%s: negative lease", ConfigEnv)
	}
	return cfg, nil
}

// makeWorkspace makes the workspace, if it is not there, owned by the
// sandbox user.
func makeWorkspace(cfg config) error {
	fi, err := os.Lstat(cfg.Workspace)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(cfg.Workspace, 0o755); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			return os.Lchown(cfg.Workspace, cfg.uid, cfg.gid)
		}
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("the workspace %s is not a directory", cfg.Workspace)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && (int(st.Uid) != cfg.uid || int(st.Gid) != cfg.gid) {
		// An image's workspace, made by root: the user's from now on.
		return os.Lchown(cfg.Workspace, cfg.uid, cfg.gid)
	}
	return nil
}

// baseEnv is the machine's environment, as the service started the
// daemon, with a PATH if it has none.
func baseEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if k != ConfigEnv {
			env[k] = v
		}
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return env
}

// endSandbox kills every process of the sandbox: the daemon's
// descendants, and every process of the sandbox user (but not root's
// others: the service's own agent in the machine may be one).
func endSandbox(uid int) {
	self := os.Getpid()
	for range 3 { // a fork during one pass is caught by the next
		procs := listProcs()
		children := map[int][]int{}
		for pid, p := range procs {
			children[p.ppid] = append(children[p.ppid], pid)
		}
		kill := map[int]bool{}
		var walk func(int)
		walk = func(pid int) {
			for _, c := range children[pid] {
				if !kill[c] {
					kill[c] = true
					walk(c)
				}
			}
		}
		walk(self)
		if uid != 0 {
			for pid, p := range procs {
				if p.uid == uid {
					kill[pid] = true
				}
			}
		}
		delete(kill, self)
		for pid := range kill {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(kill) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type procInfo struct{ ppid, uid int }

// listProcs reads every process's parent and real uid from /proc.
func listProcs() map[int]procInfo {
	out := map[int]procInfo{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		p := procInfo{ppid: -1, uid: -1}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				p.ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			} else if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					p.uid, _ = strconv.Atoi(f[0])
				}
			}
		}
		out[pid] = p
	}
	return out
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	return strings.ReplaceAll(s, "\n", " ")
}
