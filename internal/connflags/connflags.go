// Package connflags declares how berth's commands reach the Temporal
// server, as the temporal CLI does: flags over TEMPORAL_* environment
// variables over a profile of the config file (TEMPORAL_CONFIG_FILE,
// TEMPORAL_PROFILE). The client commands and the host's (berth worker)
// share it, so that they are configured alike.
package connflags

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/pflag"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
)

// DefaultAddress is the server's address when nothing names one: berth
// dev's.
const DefaultAddress = "127.0.0.1:7233"

// Flags are the connection settings given on the command line.
type Flags struct {
	Address, Namespace, APIKey        string
	Profile, ConfigFile               string
	TLS                               bool
	TLSCert, TLSKey, TLSCA, TLSServer string
	// RetryFor is how long a client waits for an unavailable server.
	RetryFor time.Duration
}

// Register declares the flags on fs; retryFor is --retry-for's default.
func (f *Flags) Register(fs *pflag.FlagSet, retryFor time.Duration) {
	fs.StringVar(&f.Address, "address", "", "Temporal frontend host:port (default $TEMPORAL_ADDRESS, the profile's, or "+DefaultAddress+")")
	fs.StringVar(&f.Namespace, "namespace", "", "Temporal namespace (default $TEMPORAL_NAMESPACE, the profile's, or default)")
	fs.StringVar(&f.APIKey, "api-key", "", "API key (default $TEMPORAL_API_KEY); turns TLS on")
	fs.StringVar(&f.Profile, "profile", "", "profile of the config file (default $TEMPORAL_PROFILE or default)")
	fs.StringVar(&f.ConfigFile, "config-file", "", "Temporal config file (default $TEMPORAL_CONFIG_FILE or the temporal CLI's)")
	fs.BoolVar(&f.TLS, "tls", false, "connect with TLS (default $TEMPORAL_TLS)")
	fs.StringVar(&f.TLSCert, "tls-cert-path", "", "client certificate for mTLS (default $TEMPORAL_TLS_CLIENT_CERT_PATH)")
	fs.StringVar(&f.TLSKey, "tls-key-path", "", "client key for mTLS (default $TEMPORAL_TLS_CLIENT_KEY_PATH)")
	fs.StringVar(&f.TLSCA, "tls-ca-path", "", "CA certificate of the server (default $TEMPORAL_TLS_SERVER_CA_CERT_PATH)")
	fs.StringVar(&f.TLSServer, "tls-server-name", "", "server name to verify (default $TEMPORAL_TLS_SERVER_NAME)")
	fs.DurationVar(&f.RetryFor, "retry-for", retryFor, "how long to wait for an unavailable server before giving up")
}

// Options makes the Temporal client options the flags, the environment
// and the config file say.
func (f *Flags) Options() (client.Options, error) {
	prof, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{
		ConfigFilePath: f.ConfigFile, ConfigFileProfile: f.Profile,
	})
	if err != nil {
		return client.Options{}, fmt.Errorf("connection settings: %w", err)
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&prof.Address, f.Address)
	if prof.Address == "" {
		prof.Address = DefaultAddress
	}
	set(&prof.Namespace, f.Namespace)
	set(&prof.APIKey, f.APIKey)
	if f.TLS || f.TLSCert != "" || f.TLSKey != "" || f.TLSCA != "" || f.TLSServer != "" {
		if prof.TLS == nil {
			prof.TLS = &envconfig.ClientConfigTLS{}
		}
		prof.TLS.Disabled = false
		set(&prof.TLS.ClientCertPath, f.TLSCert)
		set(&prof.TLS.ClientKeyPath, f.TLSKey)
		set(&prof.TLS.ServerCACertPath, f.TLSCA)
		set(&prof.TLS.ServerName, f.TLSServer)
	}
	opts, err := prof.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return client.Options{}, fmt.Errorf("connection settings: %w", err)
	}
	return opts, nil
}

// Dial connects to the Temporal server, saying at once, in one line,
// when it is not there.
func Dial(ctx context.Context, opts client.Options) (client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, dialError(ctx, opts, err, net.DefaultResolver.LookupHost)
	}
	return c, nil
}

// unavailable is the kind of a server that cannot be reached, as the
// server's own errors name it.
const unavailable = "Unavailable"

// dialError says in one line why the server at opts.HostPort could not
// be reached. gRPC reports a name that does not resolve as "no children
// to pick from": lookup, asked again, tells it apart.
func dialError(ctx context.Context, opts client.Options, err error, lookup func(context.Context, string) ([]string, error)) error {
	if host, _, serr := net.SplitHostPort(opts.HostPort); serr == nil && net.ParseIP(host) == nil {
		var dnsErr *net.DNSError
		if _, lerr := lookup(ctx, host); errors.As(lerr, &dnsErr) {
			reason := dnsErr.Err
			if dnsErr.IsNotFound {
				reason = "no such host"
			}
			return fmt.Errorf("%s: cannot resolve host %q of the Temporal server's address %s (--address, $TEMPORAL_ADDRESS): %s",
				unavailable, host, opts.HostPort, reason)
		}
	}
	// A handshake refused looks like a server gone: say what to check.
	hint := "is berth dev running, or does the server want TLS?"
	if opts.ConnectionOptions.TLS != nil {
		hint = "are --tls-ca-path, --tls-cert-path and --tls-key-path right?"
	}
	return fmt.Errorf("cannot reach the Temporal server at %s (%s): %v", opts.HostPort, hint, RootCause(err))
}

// RootCause is the error at the bottom of a chain, for messages about
// connections, where the layers above repeat it.
func RootCause(err error) error {
	for {
		var se serviceerror.ServiceError
		if errors.As(err, &se) {
			return se
		}
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
