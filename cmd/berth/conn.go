package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/log"

	"github.com/berth-dev/berth/client"
)

// connFlags are how every command reaches the Temporal server, as the
// temporal CLI does: flags over TEMPORAL_* variables over the profile of
// a config file (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE).
type connFlags struct {
	address, namespace, apiKey        string
	profile, configFile               string
	tls                               bool
	tlsCert, tlsKey, tlsCA, tlsServer string
	retryFor                          time.Duration
}

// register declares the flags on the root, for every command.
func (f *connFlags) register(cmd *cobra.Command) {
	p := cmd.PersistentFlags()
	p.StringVar(&f.address, "address", "", "Temporal frontend host:port (default $TEMPORAL_ADDRESS, the profile's, or 127.0.0.1:7233)")
	p.StringVar(&f.namespace, "namespace", "", "Temporal namespace (default $TEMPORAL_NAMESPACE, the profile's, or default)")
	p.StringVar(&f.apiKey, "api-key", "", "API key (default $TEMPORAL_API_KEY); turns TLS on")
	p.StringVar(&f.profile, "profile", "", "profile of the config file (default $TEMPORAL_PROFILE or default)")
	p.StringVar(&f.configFile, "config-file", "", "Temporal config file (default $TEMPORAL_CONFIG_FILE or the temporal CLI's)")
	p.BoolVar(&f.tls, "tls", false, "connect with TLS (default $TEMPORAL_TLS)")
	p.StringVar(&f.tlsCert, "tls-cert-path", "", "client certificate for mTLS (default $TEMPORAL_TLS_CLIENT_CERT_PATH)")
	p.StringVar(&f.tlsKey, "tls-key-path", "", "client key for mTLS (default $TEMPORAL_TLS_CLIENT_KEY_PATH)")
	p.StringVar(&f.tlsCA, "tls-ca-path", "", "CA certificate of the server (default $TEMPORAL_TLS_SERVER_CA_CERT_PATH)")
	p.StringVar(&f.tlsServer, "tls-server-name", "", "server name to verify (default $TEMPORAL_TLS_SERVER_NAME)")
	p.DurationVar(&f.retryFor, "retry-for", client.DefaultRetryFor, "how long to wait for an unavailable server before giving up")
}

// options makes the Temporal client options the flags, the environment
// and the config file say.
func (f *connFlags) options() (tclient.Options, error) {
	prof, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{
		ConfigFilePath: f.configFile, ConfigFileProfile: f.profile,
	})
	if err != nil {
		return tclient.Options{}, fmt.Errorf("connection settings: %w", err)
	}
	if f.address != "" {
		prof.Address = f.address
	}
	if prof.Address == "" {
		prof.Address = "127.0.0.1:7233"
	}
	if f.namespace != "" {
		prof.Namespace = f.namespace
	}
	if f.apiKey != "" {
		prof.APIKey = f.apiKey
	}
	if f.tls || f.tlsCert != "" || f.tlsKey != "" || f.tlsCA != "" || f.tlsServer != "" {
		if prof.TLS == nil {
			prof.TLS = &envconfig.ClientConfigTLS{}
		}
		prof.TLS.Disabled = false
		set := func(dst *string, v string) {
			if v != "" {
				*dst = v
			}
		}
		set(&prof.TLS.ClientCertPath, f.tlsCert)
		set(&prof.TLS.ClientKeyPath, f.tlsKey)
		set(&prof.TLS.ServerCACertPath, f.tlsCA)
		set(&prof.TLS.ServerName, f.tlsServer)
	}
	opts, err := prof.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return tclient.Options{}, fmt.Errorf("connection settings: %w", err)
	}
	opts.Logger = quietLogger()
	return opts, nil
}

// dial connects to the Temporal server, saying at once, in one line,
// when it is not there.
func (f *connFlags) dial(ctx context.Context) (*client.Client, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := tclient.DialContext(dctx, opts)
	if err != nil {
		// A handshake refused looks like a server gone: say what to check.
		hint := "is berth dev running, or does the server want TLS?"
		if opts.ConnectionOptions.TLS != nil {
			hint = "are --tls-ca-path, --tls-cert-path and --tls-key-path right?"
		}
		return nil, fmt.Errorf("cannot reach the Temporal server at %s (%s): %v", opts.HostPort, hint, rootCause(err))
	}
	return client.New(c, client.WithRetryFor(f.retryFor), client.OnWait(func(err error) {
		fmt.Fprintf(os.Stderr, "berth: the Temporal server at %s is unavailable; retrying for up to %v\n", opts.HostPort, f.retryFor)
	})), nil
}

// quietLogger keeps the SDK's own logs off a command's output.
func quietLogger() log.Logger { return log.NewStructuredLogger(slog.New(slog.DiscardHandler)) }
