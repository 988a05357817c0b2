package modal

import (
	"context"
	"log/slog"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote"
)

// Name is the provider's name.
const Name = "modal"

// DefaultSecretEnv is the variable that holds the secret the daemons'
// tokens derive from, unless secret-env names another.
const DefaultSecretEnv = "BERTH_MODAL_SECRET"

// defaultPort is the daemon's port unless the port setting names another.
const defaultPort = remote.DefaultPort

func init() {
	provider.Register(Name, func(ctx context.Context, pc provider.Config) (provider.Provider, error) {
		api, rc, err := Open(ctx, pc)
		if err != nil {
			return nil, err
		}
		return remote.New(api, rc), nil
	})
}

// Open reads the provider's settings: the API's (ParseConfig), and
// package remote's (remote.Open; the secret's variable defaults to
// BERTH_MODAL_SECRET). The daemon's port is the one every sandbox opens
// a tunnel for; commands run as the user setting's user.
func Open(ctx context.Context, pc provider.Config) (*API, remote.Config, error) {
	var port int
	if _, rc, err := remote.SplitConfig(Name, pc, DefaultSecretEnv); err == nil {
		port = rc.Port
	}
	api, rc, err := remote.Open(ctx, Name, DefaultSecretEnv, pc, func(pc provider.Config, log *slog.Logger) (*API, string, error) {
		cfg, err := ParseConfig(pc)
		if err != nil {
			return nil, "", err
		}
		cfg.Logger, cfg.Port = log, port
		api, err := New(cfg)
		return api, cfg.TokenID + ":" + cfg.TokenSecret, err
	})
	if err != nil {
		return nil, rc, err
	}
	rc.User = api.cfg.User
	// Modal ends a sandbox at its timeout, which cannot be moved on: a
	// berth sandbox that lives longer moves to a new one before it.
	rc.MaxLifetime = MaxTimeout
	if rc.Port == 0 {
		rc.Port = api.cfg.Port
	}
	return api, rc, nil
}
