package model_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/internal/testserver"
	"github.com/berth-dev/berth/transfer"
)

// callModel is a workflow that calls the model activity once, with the
// options the agent uses.
func callModel(ctx workflow.Context, req chat.Request) (chat.Response, error) {
	ctx = workflow.WithActivityOptions(ctx, model.ActivityOptions())
	var resp chat.Response
	err := workflow.ExecuteActivity(ctx, model.ActivityName, req).Get(ctx, &resp)
	return resp, err
}

// On a real server: a call heartbeats while the model says nothing yet;
// a 429 is retried after the server's Retry-After, a 500 after the
// policy's backoff, and the call then succeeds.
func TestRetriesOnServer(t *testing.T) {
	c := testserver.Client(t)

	fake, m, _ := setup(t)
	w := worker.New(c, "model-test", worker.Options{})
	w.RegisterWorkflow(callModel)
	m.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	gate := fake.Hold()
	fake.FailNext(429, 1)
	fake.RetryAfter(2 * time.Second)
	fake.Script(fakemodel.Reply{Text: "third time lucky"})
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: "model-test"}, callModel,
		chat.Request{Conversation: "r", New: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	<-gate.Arrived()
	testkit.Eventually(t, "a heartbeat of the held call", 10*time.Second, func() bool {
		desc, err := c.DescribeWorkflowExecution(t.Context(), run.GetID(), "")
		if err != nil || len(desc.PendingActivities) != 1 || desc.PendingActivities[0].HeartbeatDetails == nil {
			return false
		}
		var p model.Progress
		payloads := desc.PendingActivities[0].HeartbeatDetails.Payloads
		return len(payloads) == 1 && json.Unmarshal(payloads[0].Data, &p) == nil
	})
	released := time.Now()
	gate.Release()
	// The 429 is answered now; a 500 waits for the second attempt.
	fake.RetryAfter(0)
	fake.FailNext(500, 1)

	var resp chat.Response
	if err := run.Get(t.Context(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "third time lucky" || resp.Usage.TotalTokens == 0 {
		t.Errorf("answer %+v, usage %+v", resp.Message, resp.Usage)
	}
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3 (429, 500, success)", len(reqs))
	}
	// The policy's backoff alone would retry after 1s.
	if gap := reqs[1].Received.Sub(released); gap < 2*time.Second {
		t.Errorf("the retry after a 429 with Retry-After: 2 came %v after it", gap)
	}
}

// A model call cut off mid-answer is retried; the streamed answer keeps
// what the first attempt sent, then a note and the new answer, so that a
// front end reading on from where it was sees no mix of the two.
func TestRetryStreamsOn(t *testing.T) {
	c := testserver.Client(t)
	fake, m, bucket := setup(t)
	w := worker.New(c, "model-retry-stream", worker.Options{})
	w.RegisterWorkflow(callModel)
	m.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	first, second := "The first answer, which will be cut off here", "The second answer, whole."
	fake.Script(fakemodel.Reply{Text: first, CutAfter: 20}, fakemodel.Reply{Text: second})
	stream := transfer.Outputs + "agent/retry/turn-1"
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: "model-retry-stream"}, callModel,
		chat.Request{Conversation: "retry", Stream: stream, New: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	var resp chat.Response
	if err := run.Get(t.Context(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != second {
		t.Errorf("answer %q, want %q", resp.Message.Content, second)
	}
	streamed, err := transfer.ReadAt(t.Context(), bucket, stream, 0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	cut, rest, ok := strings.Cut(string(streamed), "\n[the model's answer was cut off; it is asked again]\n")
	if !ok || rest != second || len(cut) < 20 || !strings.HasPrefix(first, cut) {
		t.Errorf("streamed %q: want the first attempt's start, the note, then the second answer", streamed)
	}
}
