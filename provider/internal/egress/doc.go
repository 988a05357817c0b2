// Package egress decides and relays a sandbox's outbound TCP connections:
// it is the proxy a sandbox's network namespace sends its traffic to,
// running on the host.
//
// # Modes
//
// [Proxy.Serve] takes connections the kernel redirected (nftables DNAT or
// REDIRECT from the sandbox's namespace, built elsewhere) and learns where
// each was going with SO_ORIGINAL_DST. [Proxy.ServeExplicit] is an HTTP
// proxy (absolute-form requests and CONNECT), for providers where the
// sandbox is given HTTPS_PROXY instead. Either way the sandbox is known by
// the connection's source address, which the provider registers with
// [Proxy.Register]; a connection from any other source is refused.
//
// # Decisions
//
// A connection is allowed by name, not by address: the name is taken from
// the TLS ClientHello's server name, an HTTP request's Host, or a CONNECT
// line; it must pass the policy ([provider.Network.AllowsHost]); it is
// resolved on the host, once, and every address it resolves to that lies
// in a forbidden range (loopback, link-local, private, the host's own, ...)
// is dropped unless a CIDR rule allows it; the proxy dials an address so
// checked, never the address the sandbox asked for. So a forged server name
// reaches only the allowed name's servers, and a name that rebinds between
// two lookups cannot lead anywhere the check did not see. A connection that
// carries no name (an address literal, another protocol) is allowed only
// by a CIDR rule.
//
// # Credentials
//
// A [Credential] is a header the proxy adds to a sandbox's requests to a
// host, so that the sandbox uses a secret it never holds. Plain HTTP
// requests get it directly; HTTPS to a host that has one is terminated
// with the proxy's own certificate authority ([Proxy.CACertPEM], which the
// sandbox must trust; kept across restarts in [Config.CAFile]) and
// re-originated to the real host, whose certificate is verified.
// Connections to hosts without credentials are relayed byte for byte
// and never decrypted: spliced in the kernel between the two TCP
// connections, the bandwidth paid per move, through socket buffers the
// relay sets and grows within the sandbox's relay buffer budget, so that
// a sandbox that never reads cannot make the host's kernel hold more. A credential's value is
// never logged and never part of an error.
//
// # Bounds
//
// Connections per sandbox and in all, new connections per second per
// sandbox, bandwidth per sandbox, the time and bytes a sandbox has to send
// its first header, idle and dial times, the bytes its relayed
// connections may hold in the kernel (the relay buffer budget): each has
// a default (the Default* constants) and a field of [Config]. Every refusal is counted by reason
// ([Proxy.Stats]) and logged at debug level.
package egress
