package agentcore

import (
	"context"
	"log/slog"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote"
)

// Name is the provider's name.
const Name = "agentcore"

// DefaultSecretEnv is the variable that holds the secret the daemons'
// tokens derive from, unless secret-env names another.
const DefaultSecretEnv = "BERTH_AGENTCORE_SECRET"

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
// BERTH_AGENTCORE_SECRET). With no secret set, the daemons' secret
// derives from the AWS secret access key the default chain gives:
// credentials that rotate (a role's) need the secret set, or a worker
// with new credentials no longer reaches the daemons it started.
func Open(ctx context.Context, pc provider.Config) (*API, remote.Config, error) {
	api, rc, err := remote.Open(ctx, Name, DefaultSecretEnv, pc, func(pc provider.Config, log *slog.Logger) (*API, string, error) {
		cfg, err := ParseConfig(pc)
		if err != nil {
			return nil, "", err
		}
		cfg.Logger = log
		api, err := New(ctx, cfg)
		if err != nil {
			return nil, "", err
		}
		return api, api.secretKey, nil
	})
	if api != nil {
		rc.RemotePath, rc.MaxLifetime = api.cfg.DaemonPath, api.cfg.MaxLifetime
	}
	return api, rc, err
}
