package e2b

import (
	"context"
	"log/slog"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote"
)

// Name is the provider's name.
const Name = "e2b"

// DefaultSecretEnv is the variable that holds the secret the daemons'
// tokens derive from, unless secret-env names another.
const DefaultSecretEnv = "BERTH_E2B_SECRET"

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
// BERTH_E2B_SECRET). The plan's cap on a sandbox's lifetime
// (max-lifetime) is the provider's MaxLifetime: a berth sandbox that
// lives longer moves to a new E2B sandbox before it.
func Open(ctx context.Context, pc provider.Config) (*API, remote.Config, error) {
	api, rc, err := remote.Open(ctx, Name, DefaultSecretEnv, pc, func(pc provider.Config, log *slog.Logger) (*API, string, error) {
		cfg, err := ParseConfig(pc)
		if err != nil {
			return nil, "", err
		}
		cfg.Logger = log
		api, err := New(cfg)
		return api, cfg.APIKey, err
	})
	if api != nil {
		rc.MaxLifetime = api.cfg.MaxLifetime
	}
	return api, rc, err
}
