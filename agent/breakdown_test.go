package agent_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/sandbox"
)

// BenchmarkToolCallPhases is BenchmarkToolCall broken down by the
// server's clock, from the session's history: per step, how long the
// model activity waited to be picked up, ran, and how long the workflow
// task that follows waited and ran (the command included).
func BenchmarkToolCallPhases(b *testing.B) {
	b.Run("model-queue", func(b *testing.B) { benchPhases(b, false) })
	b.Run("eager", func(b *testing.B) { benchPhases(b, true) })
}

func benchPhases(b *testing.B, eager bool) {
	const toolCalls = 20
	h := newHarness(b)
	in := agent.SessionInput{MaxSteps: toolCalls + 1}
	if eager {
		in.ModelQueue = sandbox.DefaultQueue
	}
	s := h.start(in)
	phases := map[string][]time.Duration{}
	turn := 0
	for b.Loop() {
		for i := range toolCalls {
			h.Model.Script(fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{shell(fmt.Sprint("t", turn, "-", i), "/bin/true")}})
		}
		h.Model.Script(fakemodel.Reply{Text: "done"})
		turn = s.send("run /bin/true")
		s.turn(turn)
	}
	b.StopTimer()
	it := h.C.GetWorkflowHistory(b.Context(), s.id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var last = map[enumspb.EventType]time.Time{}
	counts := map[enumspb.EventType]int{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			b.Fatal(err)
		}
		t := e.GetEventTime().AsTime()
		typ := e.GetEventType()
		counts[typ]++
		switch typ {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			phases["1 activity schedule-to-start"] = append(phases["1 activity schedule-to-start"], t.Sub(last[enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]))
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			phases["2 activity start-to-close"] = append(phases["2 activity start-to-close"], t.Sub(last[enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED]))
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			phases["3 wft schedule-to-start"] = append(phases["3 wft schedule-to-start"], t.Sub(last[enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED]))
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			phases["4 wft start-to-close"] = append(phases["4 wft start-to-close"], t.Sub(last[enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED]))
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if !last[enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED].IsZero() {
				phases["0 step"] = append(phases["0 step"], t.Sub(last[enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]))
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			phases["5 activity close-to-wft-schedule"] = append(phases["5 activity close-to-wft-schedule"], t.Sub(last[enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]))
		}
		last[typ] = t
	}
	b.Logf("events: %v", counts)
	for _, name := range slices.Sorted(maps.Keys(phases)) {
		ds := phases[name]
		slices.Sort(ds)
		b.Logf("%s: median %v p90 %v (n=%d)", name, ds[len(ds)/2], ds[len(ds)*9/10], len(ds))
	}
}
