package gke

import (
	"context"
	"crypto/rand"
	"log/slog"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote"
)

// Name is the provider's name.
const Name = "gke"

// DefaultSecretEnv is the variable that holds the secret the daemons'
// tokens derive from, unless secret-env names another. A cluster has no
// single API key to derive it from: with none set it derives from the
// kubeconfig's bearer token, if any.
const DefaultSecretEnv = "BERTH_GKE_SECRET"

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
// BERTH_GKE_SECRET). With daemon-baked set, the daemon's path in the
// sandbox is the baked one and nothing is uploaded.
func Open(ctx context.Context, pc provider.Config) (*API, remote.Config, error) {
	api, rc, err := remote.Open(ctx, Name, DefaultSecretEnv, pc, func(pc provider.Config, log *slog.Logger) (*API, string, error) {
		cfg, err := ParseConfig(pc)
		if err != nil {
			return nil, "", err
		}
		cfg.Logger = log
		api, err := New(cfg)
		if err != nil {
			return nil, "", err
		}
		// With no secret set, the daemons' secret derives from the
		// kubeconfig's bearer token; a credential of another kind
		// (a client certificate, an exec plugin) gives a random one,
		// good for this process only.
		key := api.rest.BearerToken
		if key == "" {
			key = rand.Text()
		}
		return api, key, nil
	})
	if err == nil && api.cfg.DaemonBaked != "" {
		rc.RemotePath = api.cfg.DaemonBaked
	}
	return api, rc, err
}
