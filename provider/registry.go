package provider

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/berth-dev/berth/errdefs"
)

// Config holds a provider's settings as text, as they come from flags or a
// file (for linux: "state-dir" => "/var/lib/berth/linux"). Each provider
// decodes it into its own typed configuration and rejects keys it does not
// know.
type Config map[string]string

// Factory opens a provider with its configuration. Its logger, if the
// caller gave one, is LoggerFrom(ctx). A provider that holds resources
// of its own implements io.Closer.
type Factory func(ctx context.Context, cfg Config) (Provider, error)

var registry = struct {
	sync.RWMutex
	m map[string]Factory
}{m: map[string]Factory{}}

// Register makes a provider available under name. Like database/sql, it is
// meant to be called from an init function, and panics when name is
// taken or factory is nil.
func Register(name string, factory Factory) {
	registry.Lock()
	defer registry.Unlock()
	if factory == nil {
		panic("provider: Register factory is nil for " + name)
	}
	if _, dup := registry.m[name]; dup {
		panic("provider: Register called twice for " + name)
	}
	registry.m[name] = factory
}

// Open opens the provider registered under name.
func Open(ctx context.Context, name string, cfg Config) (Provider, error) {
	registry.RLock()
	factory, ok := registry.m[name]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: unknown provider %q (known: %v)", errdefs.ErrBadInput, name, Names())
	}
	p, err := factory(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open provider %q: %w", name, err)
	}
	return p, nil
}

// Names lists the registered providers, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.m))
	for name := range registry.m {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Availability says whether a host serves a provider, and how.
type Availability struct {
	Name string `json:"name"`
	// Host names the host that answered (its task queue).
	Host string `json:"host,omitempty"`
	// Available is true when the host serves the provider. Otherwise
	// Reason says why not: its binary or engine missing, credentials
	// absent...
	Available    bool          `json:"available"`
	Reason       string        `json:"reason,omitempty"`
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// Note is what a provider that serves reports of its state
	// (Reporter): a default image being made, or why it could not be.
	Note string `json:"note,omitempty"`
	// ServiceError, when not empty, says that the service of a provider
	// the host serves failed its Check, in one line: it did not answer,
	// or refused the key. The host serves the provider still (Available),
	// but its calls fail alike until the service answers. ServiceKind is
	// that failure's kind: errdefs.ProviderAuth for a key refused,
	// errdefs.ProviderUnavailable for a service out of reach, failing, or
	// too slow to answer within the host's bound.
	ServiceError string       `json:"service_error,omitempty"`
	ServiceKind  errdefs.Kind `json:"service_kind,omitempty"`
}
