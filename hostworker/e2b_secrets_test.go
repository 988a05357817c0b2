package hostworker_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/proto"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/testkit"
)

// TestE2BSecretsStayOnWorker runs a whole sandbox's life on e2b
// (create, exec, copies in and out, pause, resume, destroy, and two
// calls that fail) with a distinctive API key and daemon secret, which
// only the worker's environment holds, then looks for them, for the
// daemon's bearer token and for envd's access token (both as the gate
// saw them pass) in the history of every workflow, in the worker's
// log, in every error, and in what a command in the sandbox sees of
// the machine's processes (their arguments, and the environments the
// sandbox user may read): none may be there.
func TestE2BSecretsStayOnWorker(t *testing.T) {
	key := "e2b_" + randomHex(t, 20)
	secret := "daemons-secret-" + randomHex(t, 20)
	w := newE2BWorld(t, key, secret)
	wk := w.startWorker(t, "worker", "e2b-host-1", time.Hour)
	ctx := t.Context()
	bc := berth.New(w.c)

	var inside bytes.Buffer // what commands in the sandbox saw
	var errs []error
	sb, err := bc.Sandboxes().Create(ctx, berth.SandboxOptions{Provider: "e2b", IdleTimeout: berth.Never, HibernateAfter: berth.Never})
	if err != nil {
		t.Fatal(err)
	}
	look := "ps -eo pid,user,args; for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do cat $f 2>/dev/null | tr '\\000' '\\n'; echo; done"
	res, err := sb.Exec(ctx, []string{"sh", "-c", look}, berth.ExecOptions{Stdout: &inside, Stderr: &inside})
	if err != nil || !res.OK() {
		t.Fatalf("look at the machine's processes: %+v, %v", res, err)
	}
	// The look saw the machine's processes: the daemon among them.
	if !strings.Contains(inside.String(), "berth-sandboxd") {
		t.Fatalf("the sandbox's view of its processes shows no daemon:\n%s", inside.String())
	}
	if err := sb.WriteFiles(ctx, berth.File{Path: "in.txt", Data: []byte("copied in\n")}); err != nil {
		t.Fatal(err)
	}
	if b, err := sb.ReadFile(ctx, "in.txt"); err != nil || string(b) != "copied in\n" {
		t.Fatalf("read back: %q, %v", b, err)
	}
	if _, err := sb.ReadFile(ctx, "missing.txt"); err == nil {
		t.Fatal("reading a missing file succeeded")
	} else {
		errs = append(errs, err)
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = sb.Exec(ctx, []string{"sh", "-c", "cat in.txt; env; " + look}, berth.ExecOptions{Stdout: &inside, Stderr: &inside})
	if err != nil || !res.OK() {
		t.Fatalf("exec after resume: %+v, %v", res, err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, []string{"true"}, berth.ExecOptions{}); err == nil {
		t.Fatal("exec in a stopped sandbox succeeded")
	} else {
		errs = append(errs, err)
	}
	testkit.Eventually(t, "the sandbox destroyed", time.Minute, func() bool { return len(w.fake.Sandboxes()) == 0 })

	tokens := w.gate.tokens()
	// The daemon's bearer token and envd's access token passed.
	if len(tokens) < 2 {
		t.Fatalf("tokens seen at the gate: %d, want the daemon's and envd's", len(tokens))
	}
	secrets := map[string]string{"the API key": key, "the daemons' secret": secret}
	for i, tok := range tokens {
		secrets["token "+string(rune('A'+i))] = tok
	}
	find := func(where string, hay []byte) {
		t.Helper()
		for what, s := range secrets {
			if bytes.Contains(hay, []byte(s)) {
				t.Errorf("%s is in %s", what, where)
			}
		}
	}

	histories := 0
	for _, e := range allWorkflows(t, w, sb.ID()) {
		var hist bytes.Buffer
		it := w.c.GetWorkflowHistory(ctx, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			b, err := proto.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			hist.Write(b)
		}
		find("the history of "+e.GetType().GetName()+" "+e.GetExecution().GetWorkflowId(), hist.Bytes())
		histories++
	}
	// The sandbox's, the reaper's, and the Providers a create asks.
	if histories < 2 {
		t.Errorf("%d workflows' histories searched, want the sandbox's and the reaper's at least", histories)
	}
	log := wk.log.String()
	if !strings.Contains(log, workerReady) || !strings.Contains(log, "ActivityType=Exec") {
		t.Fatalf("the worker's log is not the worker's:\n%s", log)
	}
	find("the worker's log", []byte(log))
	for _, err := range errs {
		find("the error "+err.Error(), []byte(err.Error()))
	}
	find("what a command in the sandbox sees", inside.Bytes())
}

// allWorkflows lists every workflow execution the server has, once the
// visibility store has the sandbox's.
func allWorkflows(t *testing.T, w *e2bWorld, sandboxID string) []*workflowpb.WorkflowExecutionInfo {
	t.Helper()
	var all []*workflowpb.WorkflowExecutionInfo
	list := func() {
		all = all[:0]
		var next []byte
		for {
			resp, err := w.c.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{NextPageToken: next})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, resp.GetExecutions()...)
			if next = resp.GetNextPageToken(); len(next) == 0 {
				return
			}
		}
	}
	testkit.Eventually(t, "the sandbox's workflow listed", 30*time.Second, func() bool {
		list()
		for _, e := range all {
			if e.GetExecution().GetWorkflowId() == sandboxID {
				return true
			}
		}
		return false
	})
	return all
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
