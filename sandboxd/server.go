package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/errdefs"
)

// Config sets up a daemon. The zero value, with Workspace set, serves a
// workspace as the daemon's own user.
type Config struct {
	// Workspace is the directory, as the daemon sees it, that commands
	// work in and file operations are confined to.
	Workspace string
	// UID and GID are the sandbox user's: commands run as them and files
	// are written as them. When they equal the daemon's own ids, nothing
	// is switched.
	UID, GID int
	// Env is every command's base environment, before the request's own.
	Env map[string]string
	// Dir is the default working directory, a workspace path.
	Dir string
	// CommandOOMScoreAdj, if not zero, is the oom_score_adj commands
	// get as soon as they run, so that the kernel kills them before the
	// daemon when memory runs out.
	CommandOOMScoreAdj int
	// CommandCgroup, if set, is the tasks file of a cgroup v1 hierarchy
	// that commands are born in (and their memory charged to): one OS
	// thread of the daemon moves itself into it, and forks every
	// command, so that no command runs, even for an instant, outside it.
	// The file must have been opened by a process allowed to move the
	// daemon's threads.
	CommandCgroup *os.File
	// CgroupNamespace gives commands a cgroup namespace rooted at their
	// cgroups (the commands' cgroup, or the daemon's), so that they do
	// not see their path. The thread that forks them makes it once and
	// they are born in it: a namespace per command would cost every
	// command an unshare. The daemon needs CAP_SYS_ADMIN in its user
	// namespace.
	CgroupNamespace bool
	// OOMKills, if set, counts the kernel's out-of-memory kills in the
	// sandbox so far; a command during which it grows ran out of memory.
	OOMKills func() (int64, error)
	// OutputCap is how much of each output stream's head and tail the
	// journal keeps (zero means OutputCap); JournalBudget bounds the output
	// kept for finished commands (zero means 8 MiB).
	OutputCap     int
	JournalBudget int
	// Deferred: commands wait for Configure, which gives them their
	// environment and working directory.
	Deferred bool
	// ExitGrace is how long output is still collected after a command
	// exits, from background processes that kept its pipes open (zero
	// means 100ms). What the pipes hold when it ends is kept, however
	// late the daemon gets to it.
	ExitGrace time.Duration
	// Token, if set, is the bearer token every request must carry
	// (Authorization: Bearer TOKEN); any other gets 401, before the
	// daemon does anything else. A daemon on a unix socket only its host
	// reaches needs none; one on a TCP port does.
	Token  string
	Logger *slog.Logger
}

// Server is the daemon.
type Server struct {
	mu         sync.RWMutex  // guards cfg.Env and cfg.Dir, which Configure sets
	configured chan struct{} // closed once commands may run
	cfg        Config
	log        *slog.Logger
	root       *os.Root // the workspace
	escape     error    // what root reports for a path that leaves it
	journal    *journal
	procs      *procs
	lease      *lease
	leaseDone  chan struct{} // ends the lease's loop
	http       *http.Server
	started    time.Time
	running    atomic.Int64
	devNull    *os.File // every command's stdin, unless it has one
	switchUser bool     // commands and file operations switch to UID/GID
	// noFsuid: the kernel has no setfsuid: gVisor, whose quirks
	// linkEscapes and exportRegular allow for.
	noFsuid bool
	chroot  bool // file operations run in a root of their own: see asUser
	terms   terminals
	bufs    bufPool // the buffers of streams and pumps
}

// bufPool keeps the 64 KiB buffers that each command's output pumps
// and each response's stream take: allocated anew, they were most of
// what a command allocated (192 KiB), and, with the daemon's small
// heap, made the collector run every few commands.
type bufPool struct{ p sync.Pool }

func (b *bufPool) get() *[]byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return v
	}
	buf := make([]byte, 64<<10)
	return &buf
}

func (b *bufPool) put(buf *[]byte) { b.p.Put(buf) }

// New makes a daemon serving cfg.Workspace.
func New(cfg Config) (*Server, error) {
	if cfg.Workspace == "" {
		return nil, errors.New("sandboxd: no workspace")
	}
	if cfg.OutputCap <= 0 {
		cfg.OutputCap = OutputCap
	}
	if cfg.JournalBudget <= 0 {
		cfg.JournalBudget = 8 << 20
	}
	if cfg.ExitGrace <= 0 {
		cfg.ExitGrace = 100 * time.Millisecond
	}
	if cfg.Dir == "" {
		cfg.Dir = "."
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	root, err := os.OpenRoot(cfg.Workspace)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: open workspace: %w", err)
	}
	s := &Server{
		cfg:        cfg,
		log:        cfg.Logger,
		root:       root,
		escape:     escapeError(root),
		journal:    newJournal(cfg.OutputCap, cfg.JournalBudget),
		started:    time.Now(),
		switchUser: cfg.UID != os.Geteuid() || cfg.GID != os.Getegid(),
		noFsuid:    fsuidMissing(),
		configured: make(chan struct{}),
		lease:      newLease(os.Getpid()),
		leaseDone:  make(chan struct{}),
	}
	if s.switchUser {
		// gVisor follows links that os.Root relies on open not to
		// follow: there the workspace as root is what confines.
		if s.chroot = canChroot(cfg.Workspace); !s.chroot && s.noFsuid {
			return nil, errors.New("sandboxd: file operations cannot be confined to the workspace: the daemon needs CAP_SYS_CHROOT and unshare(CLONE_FS)")
		}
	}
	if !cfg.Deferred {
		close(s.configured)
	}
	if s.devNull, err = os.Open(os.DevNull); err != nil {
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	if s.procs, err = newProcs(cfg.CommandOOMScoreAdj, cfg.CommandCgroup, cfg.CgroupNamespace); err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET "+routeHealth, s.handleHealth)
	mux.HandleFunc("POST "+routeExec, s.handleExec)
	mux.HandleFunc("POST "+routeSignal, s.handleSignal)
	mux.HandleFunc("GET "+routeFile, s.handleReadFile)
	mux.HandleFunc("PUT "+routeFile, s.handleWriteFile)
	mux.HandleFunc("DELETE "+routeFile, s.handleRemove)
	mux.HandleFunc("GET "+routeDir, s.handleListDir)
	mux.HandleFunc("GET "+routeWorkspace, s.handleExport)
	mux.HandleFunc("PUT "+routeWorkspace, s.handleImport)
	mux.HandleFunc("POST "+routeLease, s.handleRenew)
	mux.HandleFunc("POST "+routePause, s.handlePause)
	mux.HandleFunc("POST "+routeResume, s.handleResume)
	go s.lease.run(s.leaseDone)
	mux.HandleFunc("POST "+routeTTY, s.handleTerminalInput)
	mux.HandleFunc("PUT "+routeTTY, s.handleResize)
	s.http = &http.Server{
		Handler:           authenticate(cfg.Token, s.contact(mux)),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Configure sets the base environment and default working directory of
// commands, for a daemon started before it knew them: one kept warm in a
// pool, say.
func (s *Server) Configure(env map[string]string, dir string) {
	if dir == "" {
		dir = "."
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.Env, s.cfg.Dir = env, dir
	select {
	case <-s.configured:
	default:
		close(s.configured)
	}
}

// escapeError finds out which error value os.Root uses for a path that
// leaves the root, so it can be told apart from other failures exactly.
func escapeError(root *os.Root) error {
	_, err := root.Lstat("..")
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Serve answers requests on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops serving. Commands still running are left to the caller,
// who normally ends the whole sandbox.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	close(s.leaseDone)
	s.procs.close()
	s.root.Close()
	s.devNull.Close()
	return err
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, Health{PID: os.Getpid(), StartedAt: s.started, Running: int(s.running.Load()), Paused: s.lease.isPaused()})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with err as a wireError and a status that fits it.
func writeError(w http.ResponseWriter, err error) {
	we := toWire(err)
	status := http.StatusInternalServerError
	switch we.Kind {
	case errdefs.BadInput, errdefs.CommandNotFound:
		status = http.StatusBadRequest
	case errdefs.FileNotFound:
		status = http.StatusNotFound
	case errdefs.Unsupported:
		status = http.StatusNotImplemented
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(we)
}
