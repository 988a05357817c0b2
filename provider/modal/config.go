package modal

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/settings"
)

// Config sets up the API over Modal.
type Config struct {
	// ServerURL is Modal's API ("https://api.modal.com:443"); empty
	// means $MODAL_SERVER_URL, else the SDK's default. An http:// URL is
	// dialled without TLS.
	ServerURL string
	// App is the Modal app berth's sandboxes belong to, made if missing;
	// empty means DefaultApp. Sandbox names are unique per app.
	App string
	// Environment is the Modal environment; empty means the profile's.
	Environment string
	// Image is the registry reference sandboxes are made from unless a
	// spec names one; empty means DefaultImage.
	Image string
	// User is the sandbox user commands run as. Unless it is UID:GID, a
	// layer of every image adds it (useradd -m) where the image lacks it.
	// Empty means DefaultUser.
	User string
	// IdleTimeout is Modal's idle timeout for berth's sandboxes; zero
	// turns it off (berth's lease governs idleness).
	IdleTimeout time.Duration
	// SnapshotTimeout bounds one filesystem snapshot of berth's
	// hibernation; past it the snapshot fails and berth's own
	// checkpoint serves. Zero means DefaultSnapshotTimeout, never the
	// SDK's 55 s, which large filesystems outlast.
	SnapshotTimeout time.Duration
	// SnapshotTTL is how long Modal keeps a hibernation's snapshot,
	// which berth records and wakes from only before; zero means
	// DefaultSnapshotTTL, never the SDK's unrecorded 30 days.
	SnapshotTTL time.Duration
	// TunnelCA is a PEM file of certificate authorities trusted, besides
	// the system's, for the TLS of sandboxes' tunnels (a test's CA).
	TunnelCA string
	// Port is the sandbox port the daemon serves on, opened as an
	// encrypted tunnel when a sandbox is made; Open sets it to package
	// remote's. Zero means remote.DefaultPort.
	Port int
	// TokenID and TokenSecret are the workspace's token. Required; they
	// never leave this process but for Modal's API.
	TokenID, TokenSecret string
	Logger               *slog.Logger
}

// Defaults of Config and of the provider's settings.
const (
	DefaultApp            = "berth"
	DefaultImage          = "python:3.12-slim"
	DefaultUser           = "user"
	DefaultTokenIDEnv     = "MODAL_TOKEN_ID"
	DefaultTokenSecretEnv = "MODAL_TOKEN_SECRET"
	// MaxTimeout is the longest timeout Modal gives a sandbox: berth's
	// lifetime of a sandbox on Modal is capped at it.
	MaxTimeout = 24 * time.Hour
	// DefaultSnapshotTimeout and MaxSnapshotTimeout bound a filesystem
	// snapshot: the longest stays well within the 30 minutes berth's
	// activities give a snapshot.
	DefaultSnapshotTimeout = 10 * time.Minute
	MaxSnapshotTimeout     = 25 * time.Minute
	// DefaultSnapshotTTL and MaxSnapshotTTL bound how long Modal keeps
	// a hibernation's snapshot. A hibernation that lasts longer wakes
	// from berth's checkpoint, which it always keeps too.
	DefaultSnapshotTTL = 7 * 24 * time.Hour
	MaxSnapshotTTL     = 365 * 24 * time.Hour
)

// ParseConfig reads the API's settings: server-url, app, environment,
// image, user, idle-timeout, snapshot-timeout and snapshot-ttl
// (durations), tunnel-ca-file, and the token
// from the environment variables token-id-env and token-secret-env
// (default MODAL_TOKEN_ID and MODAL_TOKEN_SECRET) or the files
// token-id-file and token-secret-file.
func ParseConfig(pc provider.Config) (Config, error) {
	var c Config
	idEnv, secretEnv, idFile, secretFile := DefaultTokenIDEnv, DefaultTokenSecretEnv, "", ""
	if err := settings.Decode(Name, pc, map[string]settings.Setting{
		"server-url":        settings.String(&c.ServerURL),
		"app":               settings.String(&c.App),
		"environment":       settings.String(&c.Environment),
		"image":             settings.String(&c.Image),
		"user":              settings.String(&c.User),
		"idle-timeout":      settings.Duration(&c.IdleTimeout),
		"snapshot-timeout":  settings.Duration(&c.SnapshotTimeout),
		"snapshot-ttl":      settings.Duration(&c.SnapshotTTL),
		"tunnel-ca-file":    settings.String(&c.TunnelCA),
		"token-id-env":      settings.String(&idEnv),
		"token-id-file":     settings.String(&idFile),
		"token-secret-env":  settings.String(&secretEnv),
		"token-secret-file": settings.String(&secretFile),
	}); err != nil {
		return c, err
	}
	var err error
	if c.TokenID, err = credential(pc, "token-id", idEnv, idFile); err != nil {
		return c, err
	}
	c.TokenSecret, err = credential(pc, "token-secret", secretEnv, secretFile)
	return c, err
}

// credential reads one half of the token from the file named, else the
// variable; its name says which, never its value.
func credential(pc provider.Config, what, env, file string) (string, error) {
	if file != "" {
		if _, set := pc[what+"-env"]; set {
			return "", fmt.Errorf("%w: %s provider: %s-env and %s-file both set", errdefs.ErrBadInput, Name, what, what)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%w: %s provider: read %s-file: %v", errdefs.ErrProviderAuth, Name, what, errors.Unwrap(err))
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("%w: %s provider: %s-file %s is empty", errdefs.ErrProviderAuth, Name, what, file)
		}
		return v, nil
	}
	v := strings.TrimSpace(os.Getenv(env))
	if v == "" {
		return "", fmt.Errorf("%w: %s provider: no %s in $%s", errdefs.ErrProviderAuth, Name, what, env)
	}
	return v, nil
}

// check fills c's defaults and checks the rest.
func (c *Config) check() error {
	if c.TokenID == "" || c.TokenSecret == "" {
		return fmt.Errorf("%w: modal: no token id and secret", errdefs.ErrProviderAuth)
	}
	if c.ServerURL != "" {
		u, err := url.Parse(c.ServerURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("%w: modal: server-url %q is not an http(s) URL of a host", errdefs.ErrBadInput, oneLineValue(c.ServerURL))
		}
	}
	if c.App == "" {
		c.App = DefaultApp
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.User == "" {
		c.User = DefaultUser
	}
	if !validUser(c.User) {
		return fmt.Errorf("%w: modal: user %q is neither a name nor UID:GID", errdefs.ErrBadInput, oneLineValue(c.User))
	}
	if c.IdleTimeout < 0 || c.IdleTimeout%time.Second != 0 {
		return fmt.Errorf("%w: modal: idle-timeout %v is not a whole number of seconds", errdefs.ErrBadInput, c.IdleTimeout)
	}
	if c.SnapshotTimeout == 0 {
		c.SnapshotTimeout = DefaultSnapshotTimeout
	}
	if c.SnapshotTimeout < time.Second || c.SnapshotTimeout > MaxSnapshotTimeout {
		return fmt.Errorf("%w: modal: snapshot-timeout %v is not between 1s and %v", errdefs.ErrBadInput, c.SnapshotTimeout, MaxSnapshotTimeout)
	}
	if c.SnapshotTTL == 0 {
		c.SnapshotTTL = DefaultSnapshotTTL
	}
	// Modal takes whole seconds, from one second on.
	if c.SnapshotTTL < time.Second || c.SnapshotTTL > MaxSnapshotTTL || c.SnapshotTTL%time.Second != 0 {
		return fmt.Errorf("%w: modal: snapshot-ttl %v is not a whole number of seconds between 1s and %v", errdefs.ErrBadInput, c.SnapshotTTL, MaxSnapshotTTL)
	}
	if c.Port == 0 {
		c.Port = defaultPort
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// oneLineValue bounds a setting's value quoted in an error.
func oneLineValue(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// validUser says whether s is "UID:GID" or a user's name that a shell
// command may carry unquoted.
func validUser(s string) bool {
	if s == "" || len(s) > 32 || s[0] == '-' {
		return false
	}
	colons := 0
	for _, r := range s {
		switch {
		case r == ':':
			colons++
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
		default:
			return false
		}
	}
	return colons == 0 || colons == 1 && !strings.HasPrefix(s, ":") && !strings.HasSuffix(s, ":")
}
