package berth

import (
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/workflows"
)

// TestRunInfoOf: a run's listing reads its command and how it ended
// from the memo its workflow keeps; a run that has not ended has none.
func TestRunInfoOf(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	info := func(status enumspb.WorkflowExecutionStatus, exit *workflows.RunExit) *workflowpb.WorkflowExecutionInfo {
		fields := map[string]*commonpb.Payload{}
		cmd, _ := dc.ToPayload("sh -c exit 7")
		fields[workflows.MemoCommand] = cmd
		if exit != nil {
			p, err := dc.ToPayload(*exit)
			if err != nil {
				t.Fatal(err)
			}
			fields[workflows.MemoExit] = p
		}
		return &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: "run-1"},
			Status: status, Memo: &commonpb.Memo{Fields: fields}}
	}
	for _, tt := range []struct {
		name   string
		info   *workflowpb.WorkflowExecutionInfo
		status string
		ended  bool
		exit   RunExit
	}{
		{"exited 7", info(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, &workflows.RunExit{ExitCode: 7}), "completed", true, RunExit{ExitCode: 7}},
		{"timeout", info(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, &workflows.RunExit{ExitCode: -1, Kind: errdefs.Timeout}), "completed", true, RunExit{ExitCode: -1, Kind: Timeout}},
		{"running", info(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil), "running", false, RunExit{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runInfoOf(tt.info)
			if r.ID != "run-1" || r.Command != "sh -c exit 7" || r.Status != tt.status || r.Ended != tt.ended || r.Exit != tt.exit {
				t.Errorf("runInfoOf = %+v; want status %q, ended %v, exit %+v", r, tt.status, tt.ended, tt.exit)
			}
		})
	}
}
