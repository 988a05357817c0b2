package devserver

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uiserveroptions "github.com/temporalio/ui-server/v2/server/server_options"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
)

// Errors returned by Start, for errors.Is.
var (
	// ErrAddressInUse means a port the server needs is taken, usually by
	// another Temporal server or berth dev.
	ErrAddressInUse = errors.New("address already in use")
	// ErrDataDirInUse means another server holds the data directory.
	ErrDataDirInUse = errors.New("data directory in use by another server")
)

// Options configure Start. Zero values are documented per field.
type Options struct {
	// DataDir holds the SQLite database (and a lock file). It is created if
	// missing; everything the server knows lives there, so a server started
	// again on the same DataDir carries on where the last one stopped, even
	// after a crash. Required, unless Postgres is set: then it holds only
	// the lock file, and may be empty.
	DataDir string

	// Postgres, when set, keeps the server's state in PostgreSQL instead
	// of SQLite; its schema must have been applied beforehand (see
	// Postgres).
	Postgres *Postgres

	// Address is the frontend's host:port, the address clients dial. The
	// host must be an IP literal or "localhost"; zero means 127.0.0.1:7233.
	// Port 0 picks a free port: Server.Address reports the real one.
	Address string

	// Namespace is created if missing, on every start. Zero means "default".
	Namespace string

	// UIPort serves the Temporal Web UI on the frontend's host at this port.
	// Zero means no UI.
	UIPort int

	// Logger receives berth's few lines about the server's life and the
	// Temporal server's own logs at Warn and above. Nil means slog.Default().
	Logger *slog.Logger

	// DynamicConfig overrides berth's tuned dynamic config, key by key (see
	// the package documentation). Unknown keys are an error. Values are
	// what go.temporal.io/server/common/dynamicconfig.StaticClient takes:
	// plain values, or []dynamicconfig.ConstrainedValue.
	DynamicConfig map[string]any

	// TLS, when set, serves the frontend over TLS (and, with a client
	// CA, mutual TLS). Nil means plain gRPC.
	TLS *TLS
}

// Server is a running embedded Temporal server. Stop it when done.
type Server struct {
	address     string
	httpAddress string
	uiAddress   string
	namespace   string
	log         *slog.Logger
	tls         *TLS
	clientTLS   *tls.Config // for the server's own clients, with TLS

	temporal  temporal.Server
	srvLogger *serverLogger
	ui        *uiserver.Server
	lock      *os.File

	stopOnce sync.Once
	stopErr  error
}

// Address is the frontend's gRPC host:port, for client.Options.HostPort.
func (s *Server) Address() string { return s.address }

// HTTPAddress is the frontend's HTTP API host:port (also what Nexus
// callbacks use). Its port is picked afresh on every start.
func (s *Server) HTTPAddress() string { return s.httpAddress }

// Namespace is the namespace Start made sure exists.
func (s *Server) Namespace() string { return s.namespace }

// UIAddress is the Web UI's host:port, or "" when Options.UIPort was zero.
func (s *Server) UIAddress() string { return s.uiAddress }

// ClientOptions returns options for a client of this server: its address
// and namespace, and no gRPC compression (the SDK's default is gzip, which on
// loopback only burns CPU on both ends). Add a Logger and the like to taste.
//
// With Options.TLS, they dial with TLS, verifying the frontend with its
// RootCAFile and presenting its ClientCertFile.
func (s *Server) ClientOptions() client.Options {
	return client.Options{
		HostPort:  s.address,
		Namespace: s.namespace,
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{},
			TLS: s.clientTLS.Clone()},
	}
}

// settings are Options checked and with defaults applied.
type settings struct {
	dataDir       string // absolute
	host          string // IP the frontend binds to
	port          int    // 0: pick one
	uiPort        int
	namespace     string
	logger        *slog.Logger
	dynamicConfig dynamicconfig.StaticClient
	tls           *TLS
	clientTLS     *tls.Config
	postgres      *Postgres
}

func (o Options) settings() (settings, error) {
	var pg *Postgres
	if o.Postgres != nil {
		if err := o.Postgres.check(); err != nil {
			return settings{}, err
		}
		p := *o.Postgres
		pg = &p
	}
	if o.DataDir == "" && pg == nil {
		return settings{}, errors.New("devserver: Options.DataDir is required: the server keeps its SQLite database there")
	}
	var dataDir string
	if o.DataDir != "" {
		var err error
		if dataDir, err = filepath.Abs(o.DataDir); err != nil {
			return settings{}, fmt.Errorf("devserver: data dir: %w", err)
		}
	}
	// The SQLite plugin builds a "file:" URI from the path without escaping.
	if strings.ContainsAny(dataDir, "?#") {
		return settings{}, fmt.Errorf("devserver: data dir %q: '?' and '#' cannot appear in the path", dataDir)
	}
	if o.UIPort < 0 || o.UIPort > 65535 {
		return settings{}, fmt.Errorf("devserver: Options.UIPort %d is not a TCP port", o.UIPort)
	}
	host, port, err := parseAddress(o.Address)
	if err != nil {
		return settings{}, err
	}
	dc, err := staticDynamicConfig(o.DynamicConfig)
	if err != nil {
		return settings{}, err
	}
	st := settings{
		dataDir:       dataDir,
		host:          host,
		port:          port,
		uiPort:        o.UIPort,
		namespace:     cmp.Or(o.Namespace, defaultNamespace),
		logger:        o.Logger,
		dynamicConfig: dc,
		postgres:      pg,
	}
	if o.TLS != nil {
		if err := o.TLS.check(); err != nil {
			return settings{}, err
		}
		t := *o.TLS
		st.tls = &t
		st.clientTLS, _ = t.clientConfig() // check read it
	}
	if st.logger == nil {
		st.logger = slog.Default()
	}
	return st, nil
}

// portAttempts bounds retries when a port picked by freePort is taken before
// the server binds it (another process binding that exact port meanwhile).
const portAttempts = 3

// Start starts a server and returns once its frontend answers requests in
// the namespace. Canceling ctx abandons a start under way: Start returns
// ctx.Err() and the half-started server is stopped in the background.
func Start(ctx context.Context, opts Options) (*Server, error) {
	begin := time.Now()
	st, err := opts.settings()
	if err != nil {
		return nil, err
	}
	// A taken port is the likeliest failure: report it before touching disk.
	if st.port != 0 {
		if err := checkFree(net.JoinHostPort(st.host, strconv.Itoa(st.port))); err != nil {
			return nil, err
		}
	}
	if st.uiPort != 0 {
		if err := checkFree(net.JoinHostPort(st.host, strconv.Itoa(st.uiPort))); err != nil {
			return nil, fmt.Errorf("devserver: Web UI: %w", err)
		}
	}

	var lock *os.File
	if st.dataDir != "" {
		if err := os.MkdirAll(st.dataDir, 0o750); err != nil {
			return nil, fmt.Errorf("devserver: create data dir: %w", err)
		}
		if lock, err = lockDataDir(st.dataDir); err != nil {
			return nil, err
		}
	}
	keepLock := false
	defer func() {
		if !keepLock {
			_ = lock.Close()
		}
	}()

	var db stores
	if st.postgres != nil {
		db = st.postgres.stores()
		if err := checkSchema(db); err != nil {
			return nil, fmt.Errorf("devserver: %s: %w", st.postgres, schemaHint(err))
		}
	} else {
		sqlConfig := sqliteConfig(filepath.Join(st.dataDir, dbFileName))
		if err := prepareDatabase(sqlConfig, st.namespace); err != nil {
			return nil, err
		}
		db = sqliteStores(sqlConfig)
	}

	srvLogger := newServerLogger(st.logger)
	var (
		srv temporal.Server
		p   ports
	)
	for attempt := 1; ; attempt++ {
		if p, err = choosePorts(st.host, st.port); err != nil {
			return nil, err
		}
		var abandoned bool
		cfg := serverConfig(p, db)
		if st.tls != nil {
			st.tls.apply(cfg)
		}
		srv, abandoned, err = startTemporal(ctx, cfg, p, st.dynamicConfig, srvLogger, lock)
		if abandoned {
			keepLock = true // the background stop releases it
		}
		if err == nil || abandoned || attempt == portAttempts || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		st.logger.Debug("temporal dev server: a port was taken while starting, retrying on new ports", "error", err)
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("devserver: %w: %w", ErrAddressInUse, err)
	}
	if err != nil && st.postgres != nil {
		return nil, fmt.Errorf("devserver: %s: %w", st.postgres, schemaHint(err))
	}
	if err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}

	keepLock = true // Stop releases it from here on
	s := &Server{
		address:     p.frontendAddress(),
		httpAddress: p.httpAddress(),
		namespace:   st.namespace,
		log:         st.logger,
		tls:         st.tls,
		clientTLS:   st.clientTLS,
		temporal:    srv,
		srvLogger:   srvLogger,
		lock:        lock,
	}
	if err := s.waitFrontend(ctx, st.postgres != nil); err != nil {
		_ = s.Stop()
		return nil, err
	}
	if st.uiPort != 0 {
		if err := s.startUI(ctx, st.host, st.uiPort, p.dialHost()); err != nil {
			_ = s.Stop()
			return nil, err
		}
	}
	data := st.dataDir
	if st.postgres != nil {
		data = st.postgres.String()
	}
	s.log.Info("temporal dev server started",
		"address", s.address, "namespace", s.namespace, "ui", s.uiAddress,
		"data", data, "took", time.Since(begin).Round(time.Millisecond))
	return s, nil
}

// Stop stops the UI and the server and releases the data directory. It is
// safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.srvLogger.quiet()
		if s.ui != nil {
			s.ui.Stop()
		}
		s.stopErr = s.temporal.Stop()
		_ = s.lock.Close() // releases the flock; nil (PostgreSQL without a data dir) is fine
		s.log.Info("temporal dev server stopped", "address", s.address)
	})
	return s.stopErr
}

// lockDataDir takes an exclusive flock on a file in dir. The kernel drops it
// when the process dies, however it dies, so a crash never leaves a stale
// lock behind.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devserver: lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("devserver: %s: %w", dir, ErrDataDirInUse)
		}
		return nil, fmt.Errorf("devserver: lock %s: %w", path, err)
	}
	return f, nil
}

// prepareDatabase makes sure the database file exists with its schema and
// holds the namespace. Both steps are safe to repeat.
func prepareDatabase(sql *config.SQL, namespace string) error {
	if err := setupSchema(sql); err != nil {
		return err
	}
	ns, err := sqlite.NewNamespaceConfig(clusterName, namespace, false, nil)
	if err != nil {
		return fmt.Errorf("devserver: namespace %q: %w", namespace, err)
	}
	// A no-op when the namespace is already there.
	if err := sqlite.CreateNamespaces(sql, ns); err != nil {
		return fmt.Errorf("devserver: create namespace %q: %w", namespace, err)
	}
	return nil
}

// setupSchema creates the database file with its schema if it does not
// exist. The schema's statements cannot be re-run on a database that has
// some of them, so it is built in a scratch file and renamed into place:
// the database either exists complete or not at all, and a crash during
// setup leaves only scratch files, removed on the next start.
func setupSchema(sql *config.SQL) error {
	path := sql.DatabaseName
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("devserver: database: %w", err)
	}

	dir := filepath.Dir(path)
	stale, _ := filepath.Glob(filepath.Join(dir, dbFileName+".setup-*"))
	for _, f := range stale {
		_ = os.Remove(f)
	}

	scratch, err := os.CreateTemp(dir, dbFileName+".setup-*")
	if err != nil {
		return fmt.Errorf("devserver: database: %w", err)
	}
	scratchPath := scratch.Name()
	_ = scratch.Close()
	defer os.Remove(scratchPath) // after a successful rename this is a no-op

	// The scratch database uses a rollback journal, so that closing it
	// leaves exactly one file to rename; the server switches it to WAL.
	scratchConfig := *sql
	scratchConfig.DatabaseName = scratchPath
	scratchConfig.ConnectAttributes = map[string]string{"mode": "rwc"}
	if err := sqlite.SetupSchema(&scratchConfig); err != nil {
		return fmt.Errorf("devserver: create database schema: %w", err)
	}
	if err := os.Rename(scratchPath, path); err != nil {
		return fmt.Errorf("devserver: database: %w", err)
	}
	return nil
}

// startTemporal builds and starts the server. Neither step can be
// interrupted, so when ctx ends first startTemporal reports abandoned, and
// the server is stopped (and lock closed) in the background once it is up.
func startTemporal(
	ctx context.Context,
	cfg *config.Config,
	p ports,
	dc dynamicconfig.StaticClient,
	logger *serverLogger,
	lock *os.File,
) (srv temporal.Server, abandoned bool, err error) {
	type result struct {
		srv temporal.Server
		err error
	}
	done := make(chan result, 1)
	go func() {
		srv, err := buildAndStart(cfg, p, dc, logger)
		done <- result{srv, err}
	}()
	select {
	case r := <-done:
		return r.srv, false, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				logger.quiet()
				_ = r.srv.Stop()
			}
			_ = lock.Close()
		}()
		return nil, true, fmt.Errorf("start: %w", ctx.Err())
	}
}

func buildAndStart(cfg *config.Config, p ports, dc dynamicconfig.StaticClient, logger *serverLogger) (srv temporal.Server, err error) {
	// The server reports some startup failures (a port taken after all)
	// through logger.Fatal, which panics with a fatalError: make it an error.
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			if srv != nil {
				_ = srv.Stop()
			}
			srv, err = nil, fe
		}
	}()

	authorizer, err := authorization.GetAuthorizerFromConfig(&cfg.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&cfg.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("claim mapper: %w", err)
	}
	// Static membership: one host per service, no ringpop gossip, so no
	// membership ports and no cluster_membership rows left by a dead process.
	hosts := map[primitives.ServiceName]static.Hosts{
		primitives.FrontendService: static.SingleLocalHost(p.frontendAddress()),
		primitives.HistoryService:  static.SingleLocalHost(internalAddress(p.history)),
		primitives.MatchingService: static.SingleLocalHost(internalAddress(p.matching)),
		primitives.WorkerService:   static.SingleLocalHost(internalAddress(p.worker)),
	}
	srv, err = temporal.NewServer(
		temporal.WithConfig(cfg),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(dc),
	)
	if err != nil {
		return nil, fmt.Errorf("create temporal server: %w", err)
	}
	if err := srv.Start(); err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("start temporal server: %w", err)
	}
	return srv, nil
}

// waitFrontend returns once a client can reach the namespace through the
// frontend, so that callers never see a half-ready server; register
// registers the namespace first if it is missing.
func (s *Server) waitFrontend(ctx context.Context, register bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	opts := s.ClientOptions()
	opts.Logger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return fmt.Errorf("devserver: frontend at %s not answering: %w", s.address, err)
	}
	defer c.Close()
	if register {
		if err := registerNamespace(ctx, c, s.namespace); err != nil {
			return err
		}
	}
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.namespace})
	if err != nil {
		return fmt.Errorf("devserver: namespace %q not served: %w", s.namespace, err)
	}
	// A namespace registered through the server is in its database at
	// once, but matching, which serves the polls, learns of it at its
	// registry's next refresh (up to 10 s): until then a worker's poll
	// fails with NamespaceNotFound. Ready means a poll would be served.
	for {
		_, err := c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
			Namespace: s.namespace, TaskQueue: &taskqueuepb.TaskQueue{Name: "berth-devserver-ready"},
		})
		var notFound *serviceerror.NamespaceNotFound
		if !errors.As(err, &notFound) {
			if err != nil {
				return fmt.Errorf("devserver: namespace %q not served by matching: %w", s.namespace, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devserver: namespace %q not served by matching within 30 s: %w", s.namespace, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startUI serves the Web UI. The UI server's Start blocks and, if it cannot
// listen, calls os.Exit through its logger; the port was checked before the
// Temporal server started, and here we wait until the UI answers.
func (s *Server) startUI(ctx context.Context, host string, port int, dialHost string) error {
	s.uiAddress = net.JoinHostPort(dialHost, strconv.Itoa(port))
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // the UI server joins host and port with a bare colon
	}
	s.ui = uiserver.NewServer(uiserveroptions.WithConfigProvider(&uiconfig.Config{
		Host:                host,
		Port:                port,
		TemporalGRPCAddress: s.address,
		TLS:                 s.uiTLS(),
		EnableUI:            true,
		DefaultNamespace:    s.namespace,
		CORS:                uiconfig.CORS{CookieInsecure: true},
		HideLogs:            true,
		DisableNewsFetch:    true, // no calls to the internet from a dev tool
	}))
	failed := make(chan error, 1)
	go func() { failed <- s.ui.Start() }()

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	url := "http://" + s.uiAddress + "/healthz"
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("devserver: Web UI: %w", err)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-failed:
			return fmt.Errorf("devserver: Web UI stopped: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("devserver: Web UI at %s not answering: %w", s.uiAddress, ctx.Err())
		case <-tick.C:
		}
	}
}
