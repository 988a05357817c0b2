package agent

import (
	"encoding/json"
	"errors"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// A manager reaches a session through an activity that sends its Update
// with an id of the manager's, so that a retried activity attaches to
// the first try's Update. The server knows an Update's id only within
// one run: if the session continued as new between the Update and the
// retry, the new run would run the operation again (a second snapshot,
// a second switch). So the session remembers its last answers to the
// manager's operations by Update id, carried across continue-as-new,
// and answers a known id with the remembered result.
const (
	// keptAnswers is how many answers a session remembers.
	keptAnswers = 16
	// maxAnswer is the longest result remembered whole, in bytes of
	// JSON; a longer one is remembered as done, and a retry is answered
	// from the current state (a fork's with its remembered snapshot).
	maxAnswer = 8 << 10
)

// Answered is the answer to one Update a manager sent.
type Answered struct {
	ID string `json:"id"`
	// Result is the result's JSON, when it is short enough.
	Result json.RawMessage `json:"result,omitempty"`
	// Snapshot is a fork's snapshot.
	Snapshot string `json:"snapshot,omitempty"`
	// Kind and Error are what the Update failed with, if it did.
	Kind  string `json:"kind,omitempty"`
	Error string `json:"error,omitempty"`
}

// answered returns the remembered answer to the current Update, if any.
func (s *session) answered(ctx workflow.Context) *Answered {
	info := workflow.GetCurrentUpdateInfo(ctx)
	if info == nil {
		return nil
	}
	for i := range s.answers {
		if s.answers[i].ID == info.ID {
			return &s.answers[i]
		}
	}
	return nil
}

// openOrAnswered is the validator of a manager's Updates: an Update
// answered before is answered again, whatever the session's state now
// (a fork's snapshot must reach the manager, which owns it); others
// need a session that has not ended.
func (s *session) openOrAnswered(ctx workflow.Context) error {
	if s.answered(ctx) != nil {
		return nil
	}
	return s.open()
}

// remember keeps the answer to the current Update, and forgets the
// oldest past keptAnswers.
func (s *session) remember(ctx workflow.Context, res any, snapshot string, err error) {
	info := workflow.GetCurrentUpdateInfo(ctx)
	if info == nil {
		return
	}
	a := Answered{ID: info.ID, Snapshot: snapshot}
	if err != nil {
		a.Kind, a.Error = kindOf(err), err.Error()
		var app *temporal.ApplicationError
		if errors.As(err, &app) {
			a.Error = app.Message()
		}
	} else if b, jerr := json.Marshal(res); jerr == nil && len(b) <= maxAnswer {
		a.Result = b
	}
	s.answers = append(s.answers, a)
	if len(s.answers) > keptAnswers {
		s.answers = s.answers[len(s.answers)-keptAnswers:]
	}
}

// kindOf is the type of the application error an Update failed with.
func kindOf(err error) string {
	var app *temporal.ApplicationError
	if !errors.As(err, &app) {
		return ""
	}
	return string(temporalerr.KindOf(err))
}

// replay answers a remembered Update again: its failure, or its result
// decoded into res; ok is false when the result was too long to keep,
// for the caller to answer from the current state.
func (a *Answered) replay(res any) (ok bool, err error) {
	if a.Error != "" || a.Kind != "" {
		return true, temporal.NewNonRetryableApplicationError(a.Error, a.Kind, nil)
	}
	if a.Result == nil {
		return false, nil
	}
	return true, json.Unmarshal(a.Result, res)
}
