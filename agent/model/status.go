package model

import (
	"context"
	"errors"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
)

// StatusActivityName is the name the model's status is served under,
// beside ActivityName, on the model's queue.
const StatusActivityName = "berth.model.status"

// The states of a model, as berth providers shows them.
const (
	// Ready: the server lists the model.
	Ready = "ready"
	// Unknown: the server lists no models; the first call will tell.
	Unknown = "unknown"
	// Unavailable: the server cannot be reached, refuses the key, or
	// does not serve the model; Reason says which, and how to fix it.
	// Calls try it again each time.
	Unavailable = "unavailable"
	// None: no model is configured.
	None = "none"
)

// Status is what a worker says of its model now.
type Status struct {
	// Model is the model's name (BERTH_MODEL); empty when none is set.
	Model string `json:"model,omitempty"`
	// Server is the server's host.
	Server string `json:"server,omitempty"`
	// State is Ready, Unknown, Unavailable or None.
	State string `json:"state"`
	// Reason is, in one line, why the model is not ready and what to
	// do.
	Reason string `json:"reason,omitempty"`
}

// Status checks the model now (Check) and says what it found.
func (m *Model) Status(ctx context.Context) (Status, error) {
	st := Status{Model: m.cfg.Model, Server: m.cfg.host(), State: Ready}
	switch err := m.Check(ctx); {
	case errors.Is(err, ErrUnlisted):
		st.State, st.Reason = Unknown, err.Error()+"; the first call will tell"
	case err != nil:
		st.State, st.Reason = Unavailable, bound(err.Error(), maxReason)
	}
	return st, nil
}

// maxReason bounds Status.Reason, which quotes the model server's
// words, in a workflow's result.
const maxReason = 1024

// bound cuts s to at most n bytes, on a rune boundary, marking the cut.
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// NoStatus is the status of a host without a usable model: None when
// cfg names no model, otherwise Unavailable because of err (a
// configuration New refused).
func NoStatus(cfg Config, err error) Status {
	if cfg.Model == "" || err == nil {
		return Status{State: None, Reason: "no model configured: set BERTH_MODEL, and OPENAI_API_KEY or OPENAI_BASE_URL, in the environment of berth dev or berth worker"}
	}
	return Status{Model: cfg.Model, Server: cfg.host(), State: Unavailable, Reason: err.Error()}
}

// RegisterStatus registers status as StatusActivityName on w.
func RegisterStatus(w worker.ActivityRegistry, status func(context.Context) (Status, error)) {
	w.RegisterActivityWithOptions(status, activity.RegisterOptions{Name: StatusActivityName})
}
