package remote

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// Settings are the text settings of a hosted provider that are this
// package's, not its service's. Every provider over an [API] reads them
// alike (see [SplitConfig]).
var Settings = []string{"daemon", "port", "secret-env", "secret-file"}

// SplitConfig splits a hosted provider's settings into its service's
// (returned as they are) and this package's, read into a Config:
// daemon (berth-sandboxd on this host, to upload), port (the daemon's,
// in the machine), and the secret the daemons' tokens derive from,
// from the environment (secret-env, default secretEnv) or a file
// (secret-file). With neither, Config.Secret is empty and the provider
// gives it KeySecret of its API key. The state-dir a host gives every
// provider is dropped: a hosted provider keeps no state on the host.
func SplitConfig(name string, pc provider.Config, secretEnv string) (provider.Config, Config, error) {
	api, own := provider.Config{}, map[string]string{}
	for k, v := range pc {
		switch {
		case k == "state-dir":
		case slices.Contains(Settings, k):
			own[k] = v
		default:
			api[k] = v
		}
	}
	var rc Config
	rc.DaemonPath = own["daemon"]
	if p, ok := own["port"]; ok {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, rc, fmt.Errorf("%w: %s provider: setting \"port\": %q is not a number", errdefs.ErrBadInput, name, p)
		}
		rc.Port = n
	}
	secret, err := secretOf(name, own, secretEnv)
	if err != nil {
		return nil, rc, err
	}
	if secret != "" {
		rc.Secret = []byte(secret)
	}
	return api, rc, nil
}

func secretOf(name string, s map[string]string, secretEnv string) (string, error) {
	if f, ok := s["secret-file"]; ok {
		if _, both := s["secret-env"]; both {
			return "", fmt.Errorf("%w: %s provider: secret-env and secret-file both set", errdefs.ErrBadInput, name)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("%w: %s provider: read secret-file %s", errdefs.ErrBadInput, name, f)
		}
		return strings.TrimSpace(string(b)), nil
	}
	env := secretEnv
	if e, ok := s["secret-env"]; ok {
		env = e
	}
	return strings.TrimSpace(os.Getenv(env)), nil
}

// KeySecret is the daemons' secret of a worker given none: one derived
// from the account's API key, so that every worker with the key, and
// one restarted, reaches the daemons of the account's machines. It
// gives nothing the key does not: with the key, the service runs any
// command in any of the account's machines. The key itself never
// reaches a machine.
func KeySecret(name, apiKey string) []byte {
	mac := hmac.New(sha256.New, []byte(apiKey))
	mac.Write([]byte("berth " + name + " daemon secret"))
	return mac.Sum(nil)
}

// Open reads a hosted provider's settings: this package's
// (SplitConfig, its secret's variable defaulting to secretEnv), and its
// service's, which newAPI reads into the provider's API, returning the
// account's API key too. With no secret set, the daemons' secret
// derives from the key (KeySecret). The logger of ctx is the API's and
// the Config's.
func Open[A API](ctx context.Context, name, secretEnv string, pc provider.Config,
	newAPI func(pc provider.Config, log *slog.Logger) (A, string, error)) (A, Config, error) {
	var zero A
	apiPC, rc, err := SplitConfig(name, pc, secretEnv)
	if err != nil {
		return zero, rc, err
	}
	rc.Logger = provider.LoggerFrom(ctx)
	api, key, err := newAPI(apiPC, rc.Logger)
	if err != nil {
		return zero, rc, err
	}
	if len(rc.Secret) == 0 {
		rc.Secret = KeySecret(name, key)
	}
	return api, rc, nil
}
