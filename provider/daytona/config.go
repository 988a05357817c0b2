package daytona

import (
	"log/slog"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/settings"
)

// Config sets up the API over Daytona.
type Config struct {
	// APIURL is Daytona's API; empty means DefaultAPIURL.
	APIURL string
	// Target is the region sandboxes are made in; empty means the
	// organization's default.
	Target string
	// Snapshot is the snapshot sandboxes start from unless a spec
	// names an image; empty means Daytona's default snapshot.
	Snapshot string
	// Image is an image reference ("python:3.12") sandboxes are made
	// from instead of a snapshot, which lets a spec size them.
	Image string
	// AutoStop is Daytona's auto-stop interval for berth's sandboxes
	// (rounded up to minutes); zero turns it off.
	AutoStop time.Duration
	// APIKey is the organization's key. Required; it never leaves this
	// process but for Daytona's API and toolbox.
	APIKey string
	Logger *slog.Logger
}

// Defaults of Config and of the provider's settings.
const (
	DefaultAPIURL    = "https://app.daytona.io/api"
	DefaultAPIKeyEnv = "DAYTONA_API_KEY"
	// DefaultUser is the unprivileged user of Daytona's snapshots,
	// whom commands run as.
	DefaultUser = "daytona"
)

// ParseConfig reads the API's settings: api-url, target, snapshot,
// image, auto-stop (a duration), and the API key from the environment
// variable api-key-env (default DAYTONA_API_KEY) or the file
// api-key-file.
func ParseConfig(pc provider.Config) (Config, error) {
	var c Config
	keyEnv, keyFile := DefaultAPIKeyEnv, ""
	if err := settings.Decode(Name, pc, map[string]settings.Setting{
		"api-url":      settings.String(&c.APIURL),
		"target":       settings.String(&c.Target),
		"snapshot":     settings.String(&c.Snapshot),
		"image":        settings.String(&c.Image),
		"auto-stop":    settings.Duration(&c.AutoStop),
		"api-key-env":  settings.String(&keyEnv),
		"api-key-file": settings.String(&keyFile),
	}); err != nil {
		return c, err
	}
	key, err := settings.APIKey(Name, pc, keyEnv, keyFile)
	c.APIKey = key
	return c, err
}
