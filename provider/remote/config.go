package remote

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/internal/settings"
)

// Config sets up the provider over an API. The zero value uploads
// berth-sandboxd from beside the running executable and serves it on
// DefaultPort, with a secret of its own (good for this process only).
type Config struct {
	// DaemonPath is the berth-sandboxd binary, on this host, that is
	// uploaded into every machine: static, built for the machines'
	// architecture. Empty means berth-sandboxd beside the running
	// executable, else the executable itself (a test binary that is its
	// own daemon).
	DaemonPath string
	// Port is the machine's TCP port the daemon serves on, which the
	// service forwards; zero means DefaultPort.
	Port int
	// RemotePath is where the daemon is uploaded in the machine; empty
	// means DefaultRemotePath.
	RemotePath string
	// Workspace is the sandbox's workspace in the machine; empty means
	// provider.Workspace.
	Workspace string
	// User is the sandbox user that commands run as and files belong
	// to: a name in the machine's /etc/passwd, or "UID:GID". Empty
	// means DefaultUser, the unprivileged user the services' templates
	// name, whatever uid a template gives it. The daemon runs as root
	// and switches to it, or runs as it.
	User string
	// Secret is what every machine's bearer token derives from (an
	// HMAC of the machine's name), so that a worker that restarts with
	// the same secret reaches the daemons it started without storing
	// anything. Empty means a random secret: the provider then reaches
	// only the machines it made itself.
	Secret []byte
	// Transport carries the requests to the daemons when the service's
	// Endpoint names none; nil means a transport of the provider's own.
	Transport http.RoundTripper
	// MaxLifetime is the longest the service keeps a machine, whatever
	// it is asked (a hard session limit); zero means none. A machine is
	// asked for no more, and Capabilities says it, so that the sandbox
	// handle moves the workspace to a new machine before the end.
	MaxLifetime time.Duration
	// ReadyTimeout bounds how long Create waits for a new machine's
	// daemon to answer; zero means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	Logger       *slog.Logger
}

// Defaults of Config.
const (
	DefaultPort         = 49999
	DefaultRemotePath   = "/opt/berth/berth-sandboxd"
	DefaultUser         = "user"
	DefaultReadyTimeout = 60 * time.Second
	// DaemonName is the daemon binary's name, looked for beside the
	// running executable.
	DaemonName = "berth-sandboxd"
)

// setDefaults fills the zero fields of c and checks the rest.
func (c *Config) setDefaults() error {
	if c.DaemonPath == "" {
		d, err := settings.DaemonBeside(DaemonName, true)
		if err != nil {
			return err
		}
		c.DaemonPath = d
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Port < 1 || c.Port > 65535 {
		return fmt.Errorf("%w: remote: port %d", errdefs.ErrBadInput, c.Port)
	}
	if c.RemotePath == "" {
		c.RemotePath = DefaultRemotePath
	}
	if !strings.HasPrefix(c.RemotePath, "/") {
		return fmt.Errorf("%w: remote: the daemon's path in the machine, %q, is not absolute", errdefs.ErrBadInput, c.RemotePath)
	}
	if c.Workspace == "" {
		c.Workspace = "/workspace"
	}
	if c.User == "" {
		c.User = DefaultUser
	}
	if err := checkUser(c.User); err != nil {
		return err
	}
	if len(c.Secret) == 0 {
		c.Secret = make([]byte, 32)
		_, _ = rand.Read(c.Secret)
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// maxUserName bounds a user's name.
const maxUserName = 32

// checkUser checks that s is "UID:GID" or could be a user's name.
func checkUser(s string) error {
	if u, g, ok := strings.Cut(s, ":"); ok {
		uid, err1 := strconv.Atoi(u)
		gid, err2 := strconv.Atoi(g)
		if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
			return fmt.Errorf("%w: remote: user %q is not UID:GID", errdefs.ErrBadInput, s)
		}
		return nil
	}
	if s == "" || len(s) > maxUserName || strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) || s[0] == '-' {
		return fmt.Errorf("%w: remote: user %q is neither a name nor UID:GID", errdefs.ErrBadInput, s)
	}
	return nil
}

// token is the bearer token of the daemon in the machine named name.
func (c *Config) token(name string) string {
	m := hmac.New(sha256.New, c.Secret)
	m.Write([]byte("berth-sandboxd token\x00" + name))
	return hex.EncodeToString(m.Sum(nil))
}
