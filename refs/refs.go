// Package refs holds the values that the sandbox handle (layer 3) and
// the activities under it (layer 2) pass each other and keep in
// workflow state and history: a sandbox's reference and a snapshot's
// listing. Both layers name them from here, so that neither copies the
// other's types; it is plain data, with no Temporal and no berth
// package beneath it.
//
// Their JSON is in the histories and states of running workflows:
// change a field's name or meaning only with a new field.
package refs

import "time"

// Sandbox names a sandbox outside its provider: its provider, its id,
// and the task queue of the workers that can reach it.
type Sandbox struct {
	Provider string `json:"provider"`
	ID       string `json:"id"`
	// Queue is where the sandbox's operations go: for a host-bound
	// provider, the queue of the worker on its host.
	Queue string `json:"queue"`
	// MaxLifetime is how long after its creation the provider's
	// service ends the sandbox whatever berth does (a hard limit of the
	// service's, shorter than the sandbox's lifetime); zero when the
	// sandbox lives as long as its spec says. The handle moves the
	// workspace to a new sandbox before then.
	MaxLifetime time.Duration `json:"max_lifetime,omitempty"`
	// Hibernate: the provider keeps a sandbox's whole filesystem itself
	// (provider.Hibernator), and the handle hibernates the sandbox so,
	// its own checkpoint kept besides.
	Hibernate bool `json:"hibernate,omitempty"`
}

// Snapshot describes a snapshot in the store, for front ends.
type Snapshot struct {
	ID      string            `json:"id"`
	Kind    string            `json:"kind"` // a snapshot.Kind: "user" or "checkpoint"
	Created time.Time         `json:"created"`
	Labels  map[string]string `json:"labels,omitempty"`
	Files   int               `json:"files"`
	Size    int64             `json:"size"`   // bytes of files
	Stored  int64             `json:"stored"` // bytes this snapshot added to the store
}
