package agent_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/sandbox"
)

// BenchmarkToolCall measures berth's overhead per tool call within a
// turn: each turn is toolCalls model steps, each asking for one shell
// call of /bin/true, then an answer; the fake model answers at once. The
// figure is the median time from one model request to the next: the
// answer's streaming and storing, the workflow task, the command's
// activity in the sandbox (/bin/true itself takes about a millisecond),
// the next workflow task and the next model call's start.
//
// model-queue is the default, the model activity on its own queue;
// eager asks for it on the session's own queue, which a single host
// (the harness's, as berth dev's) serves from the session's worker, so
// that the server hands each model call over in the reply to the
// workflow task that asks for it.
func BenchmarkToolCall(b *testing.B) {
	b.Run("model-queue", func(b *testing.B) { benchToolCall(b, false) })
	b.Run("eager", func(b *testing.B) { benchToolCall(b, true) })
}

func benchToolCall(b *testing.B, eager bool) {
	const toolCalls = 20
	h := newHarness(b)
	in := agent.SessionInput{MaxSteps: toolCalls + 1}
	if eager {
		in.ModelQueue = sandbox.DefaultQueue
	}
	s := h.start(in)
	var gaps []time.Duration
	turn := 0
	for b.Loop() {
		for i := range toolCalls {
			h.Model.Script(fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{shell(fmt.Sprint("t", turn, "-", i), "/bin/true")}})
		}
		h.Model.Script(fakemodel.Reply{Text: "done"})
		before := len(h.Model.Requests())
		turn = s.send("run /bin/true")
		if st := s.turn(turn); st.Status != agent.StatusDone || len(st.Calls) != toolCalls {
			b.Fatalf("turn %d: %+v", turn, st)
		}
		reqs := h.Model.Requests()[before:]
		for i := 1; i < len(reqs); i++ {
			gaps = append(gaps, reqs[i].Received.Sub(reqs[i-1].Received))
		}
	}
	slices.Sort(gaps)
	b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds())/1000, "ms/toolcall")
	b.ReportMetric(float64(gaps[len(gaps)*9/10].Microseconds())/1000, "p90-ms/toolcall")
}
