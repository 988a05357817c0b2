package daytona

import (
	"context"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote"
)

// Name is the provider's name.
const Name = "daytona"

// DefaultSecretEnv is the variable that holds the secret the daemons'
// tokens derive from, unless secret-env names another.
const DefaultSecretEnv = "BERTH_DAYTONA_SECRET"

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
// package remote's (remote.SplitConfig; the secret's variable defaults to
// BERTH_DAYTONA_SECRET). With no secret set, it derives from the API key
// (remote.KeySecret). Commands run as Daytona's user.
func Open(ctx context.Context, pc provider.Config) (*API, remote.Config, error) {
	apiPC, rc, err := remote.SplitConfig(Name, pc, DefaultSecretEnv)
	if err != nil {
		return nil, rc, err
	}
	cfg, err := ParseConfig(apiPC)
	if err != nil {
		return nil, rc, err
	}
	log := provider.LoggerFrom(ctx)
	cfg.Logger, rc.Logger = log, log
	api, err := New(cfg)
	if err != nil {
		return nil, rc, err
	}
	if len(rc.Secret) == 0 {
		rc.Secret = remote.KeySecret(Name, cfg.APIKey)
	}
	rc.User = DefaultUser
	return api, rc, nil
}
