package egress

import (
	"fmt"
	"sync/atomic"

	"github.com/berth-dev/berth/errdefs"
)

// Reason is why the proxy refused a connection or a request.
type Reason string

// The reasons of refusals.
const (
	ReasonUnknownSource  Reason = "unknown-source"   // no sandbox registered at the source address
	ReasonSandboxConns   Reason = "sandbox-conns"    // the sandbox's connections are at their bound
	ReasonTotalConns     Reason = "total-conns"      // all sandboxes' connections are at their bound
	ReasonConnRate       Reason = "conn-rate"        // the sandbox opens connections too fast
	ReasonHostNotAllowed Reason = "host-not-allowed" // the policy does not list the name on this port
	ReasonAddrForbidden  Reason = "addr-forbidden"   // every address of the name, or the literal, is refused
	ReasonNoName         Reason = "no-name"          // no name, and no CIDR rule for the address
	ReasonMismatch       Reason = "name-mismatch"    // the names a connection gives disagree
	ReasonResolve        Reason = "resolve"          // the name did not resolve
	ReasonHeader         Reason = "header"           // no header in time, a malformed or too large one
	ReasonDial           Reason = "dial"             // no address of the name answered
	ReasonBadRequest     Reason = "bad-request"      // a request the proxy does not relay
	ReasonRelayBuffer    Reason = "relay-buffer"     // the sandbox's relay buffer budget has no room for another connection
)

var reasons = []Reason{ReasonUnknownSource, ReasonSandboxConns, ReasonTotalConns, ReasonConnRate,
	ReasonHostNotAllowed, ReasonAddrForbidden, ReasonNoName, ReasonMismatch, ReasonResolve,
	ReasonHeader, ReasonDial, ReasonBadRequest, ReasonRelayBuffer}

// Refusal is the error of a refused connection. Its message holds no
// credential: only the reason and the name the sandbox gave.
type Refusal struct {
	Reason Reason
	Name   string // the name or address asked for, "" if none
}

func (r *Refusal) Error() string {
	if r.Name == "" {
		return fmt.Sprintf("egress refused: %s", r.Reason)
	}
	return fmt.Sprintf("egress refused: %s: %.253q", r.Reason, r.Name)
}

// Unwrap classifies a refusal: the bounds are quotas, the rest bad input.
func (r *Refusal) Unwrap() error {
	switch r.Reason {
	case ReasonSandboxConns, ReasonTotalConns, ReasonConnRate, ReasonRelayBuffer:
		return errdefs.ErrQuota
	}
	return errdefs.ErrBadInput
}

func refused(reason Reason, name string) *Refusal { return &Refusal{Reason: reason, Name: name} }

// Stats are a proxy's counters since it was made.
type Stats struct {
	Accepted uint64            // connections taken from registered sandboxes
	Active   int               // connections open now
	Refused  map[Reason]uint64 // refusals by reason (absent: none)
}

type counters struct {
	accepted atomic.Uint64
	refused  map[Reason]*atomic.Uint64 // fixed at New: read without a lock
}

func newCounters() *counters {
	c := &counters{refused: make(map[Reason]*atomic.Uint64, len(reasons))}
	for _, r := range reasons {
		c.refused[r] = new(atomic.Uint64)
	}
	return c
}
