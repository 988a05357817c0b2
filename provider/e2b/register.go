package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/berth-dev/berth/errdefs"
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

// remoteSettings are the settings of the provider that are package
// remote's, not the API's.
var remoteSettings = []string{"daemon", "port", "secret-env", "secret-file"}

// Open reads the provider's settings: the API's (ParseConfig), and
// package remote's: daemon (berth-sandboxd on this host, to upload),
// port (the daemon's, in the sandbox), and the secret the daemons'
// tokens derive from, from the environment (secret-env, default
// BERTH_E2B_SECRET) or a file (secret-file). With neither, the secret
// derives from the API key (keySecret).
func Open(ctx context.Context, pc provider.Config) (*API, remote.Config, error) {
	apiPC, rest := provider.Config{}, map[string]string{}
	for k, v := range pc {
		if k == "state-dir" {
			continue // a host gives every provider one; e2b keeps no state on the host
		}
		if slices.Contains(remoteSettings, k) {
			rest[k] = v
		} else {
			apiPC[k] = v
		}
	}
	cfg, err := ParseConfig(apiPC)
	if err != nil {
		return nil, remote.Config{}, err
	}
	log := provider.LoggerFrom(ctx)
	cfg.Logger = log
	api, err := New(cfg)
	if err != nil {
		return nil, remote.Config{}, err
	}
	rc := remote.Config{DaemonPath: rest["daemon"], Logger: log}
	if p, ok := rest["port"]; ok {
		if _, err := fmt.Sscan(p, &rc.Port); err != nil {
			return nil, rc, fmt.Errorf("%w: e2b provider: setting \"port\": %q is not a number", errdefs.ErrBadInput, p)
		}
	}
	secret, err := secretOf(rest)
	if err != nil {
		return nil, rc, err
	}
	rc.Secret = []byte(secret)
	if secret == "" {
		rc.Secret = keySecret(cfg.APIKey)
	}
	return api, rc, nil
}

// keySecret is the daemons' secret of a worker given none: one derived
// from the team's API key, so that every worker with the key, and one
// restarted, reaches the daemons of the team's sandboxes. It gives
// nothing the key does not: with the key, envd runs any command in any
// of the team's sandboxes. The key itself never reaches a sandbox.
func keySecret(apiKey string) []byte {
	mac := hmac.New(sha256.New, []byte(apiKey))
	mac.Write([]byte("berth e2b daemon secret"))
	return mac.Sum(nil)
}

func secretOf(s map[string]string) (string, error) {
	if f, ok := s["secret-file"]; ok {
		if _, both := s["secret-env"]; both {
			return "", fmt.Errorf("%w: e2b provider: secret-env and secret-file both set", errdefs.ErrBadInput)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("%w: e2b provider: read secret-file %s", errdefs.ErrBadInput, f)
		}
		return strings.TrimSpace(string(b)), nil
	}
	env := DefaultSecretEnv
	if e, ok := s["secret-env"]; ok {
		env = e
	}
	return strings.TrimSpace(os.Getenv(env)), nil
}
