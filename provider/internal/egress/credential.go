package egress

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"golang.org/x/net/http/httpguts"
)

// Credential is a header the proxy sets on a sandbox's requests to a
// host, replacing any the sandbox sent by that name, so that the sandbox
// can use a secret without holding it.
//
// Host is a host rule in the syntax of [provider.Network]'s Hosts: a name,
// or "*.suffix", optionally with a port. Without a port it applies on
// ports 80 and 443; give "api.example.com:443" to keep the secret off
// plain HTTP. Header is the header's name ("Authorization"), Value its
// value ("Bearer ..."). Value is printed by no method of Credential and
// enters no log and no error.
type Credential struct {
	Host   string
	Header string
	Value  string
}

// String names the credential without its value.
func (c Credential) String() string {
	return fmt.Sprintf("credential{%s %s: REDACTED}", c.Host, c.Header)
}

// GoString is String, so that %#v does not print the value either.
func (c Credential) GoString() string { return c.String() }

// LogValue logs the credential without its value.
func (c Credential) LogValue() slog.Value {
	return slog.GroupValue(slog.String("host", c.Host), slog.String("header", c.Header), slog.String("value", "REDACTED"))
}

// MarshalJSON writes the credential without its value, for a log
// handler or an encoder that reaches it inside another value: a
// credential is handed to the proxy in memory and never travels as JSON.
func (c Credential) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct{ Host, Header, Value string }{c.Host, c.Header, "REDACTED"})
}

// reservedHeaders are headers the proxy does not let a credential set:
// they frame the request or the connection.
var reservedHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection",
	"Keep-Alive", "Upgrade", "Te", "Trailer", "Expect", "Proxy-Connection", "Proxy-Authorization"}

// validate checks a credential; its errors name the host and the header,
// never the value.
func (c Credential) validate() error {
	rule := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{c.Host}}
	if err := rule.Validate(); err != nil {
		return fmt.Errorf("credential for %q: %w", c.Host, err)
	}
	if !httpguts.ValidHeaderFieldName(c.Header) {
		return fmt.Errorf("%w: credential for %q: %q is not a header name", errdefs.ErrBadInput, c.Host, c.Header)
	}
	canon := http.CanonicalHeaderKey(c.Header)
	for _, r := range reservedHeaders {
		if canon == r {
			return fmt.Errorf("%w: credential for %q: header %q frames the request and cannot be set", errdefs.ErrBadInput, c.Host, c.Header)
		}
	}
	if c.Value == "" || !httpguts.ValidHeaderFieldValue(c.Value) || strings.TrimSpace(c.Value) != c.Value {
		return fmt.Errorf("%w: credential for %q: header %s: the value is empty or not a valid header value", errdefs.ErrBadInput, c.Host, canon)
	}
	return nil
}

// matches reports whether the credential applies to name on port.
func (c Credential) matches(name string, port uint16) bool {
	return provider.Network{Mode: provider.NetworkAllow, Hosts: []string{c.Host}}.AllowsHost(name, port)
}
