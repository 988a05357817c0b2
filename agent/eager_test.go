package agent_test

import (
	"testing"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/sandbox"
)

// A single host, or a host whose model queue is its generic queue,
// serves the model from the session's own worker: a session asking for
// the model on that queue gets every call handed over eagerly, and no
// call fails for want of a worker that has the activity (each runs
// once, at its first attempt).
func TestModelOnSessionQueue(t *testing.T) {
	t.Run("single-host", func(t *testing.T) { testModelOnSessionQueue(t, "") })
	t.Run("model-queue-is-queue", func(t *testing.T) { testModelOnSessionQueue(t, sandbox.DefaultQueue) })
}

func testModelOnSessionQueue(t *testing.T, modelQueue string) {
	h := newHarness(t)
	if modelQueue != "" {
		h.StopWorker()
		h.Opts.ModelQueue = modelQueue
		h.StartWorker()
	}
	s := h.start(agent.SessionInput{ModelQueue: sandbox.DefaultQueue})
	h.Model.Script(toolCalls(shell("c1", "echo one")), toolCalls(shell("c2", "echo two")), fakemodel.Reply{Text: "done"})
	n := s.send("run two commands")
	if st := s.turn(n); st.Status != agent.StatusDone || len(st.Calls) != 2 || st.Answer != "done" {
		t.Fatalf("turn %+v", st)
	}
	it := h.C.GetWorkflowHistory(t.Context(), s.id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	models := map[int64]bool{} // the model calls' scheduled events
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if a := e.GetActivityTaskScheduledEventAttributes(); a.GetActivityType().GetName() == model.ActivityName {
				models[e.GetEventId()] = true
				if q := a.GetTaskQueue().GetName(); q != sandbox.DefaultQueue {
					t.Errorf("model call on queue %q, want %q", q, sandbox.DefaultQueue)
				}
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if a := e.GetActivityTaskStartedEventAttributes(); models[a.GetScheduledEventId()] && a.GetAttempt() != 1 {
				t.Errorf("a model call started at attempt %d", a.GetAttempt())
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			if a := e.GetActivityTaskFailedEventAttributes(); models[a.GetScheduledEventId()] {
				t.Errorf("a model call failed: %v", a.GetFailure())
			}
		}
	}
	if len(models) != 3 {
		t.Errorf("%d model calls in history, want 3", len(models))
	}
}
