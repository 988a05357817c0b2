package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/berth-dev/berth/errdefs"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth"
)

// runRow is a line of berth run ls, and its JSON.
type runRow struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// ExitCode is what berth run exited with, once the command ended.
	ExitCode *int      `json:"exit_code,omitempty"`
	Created  time.Time `json:"created"`
	Age      float64   `json:"age_seconds"`
	Command  string    `json:"command"`
}

func newRunLs(cf *connFlags) *cobra.Command {
	return listing[runRow]{
		short:   "List one-shot runs: ID, STATE (exited N once ended), AGE, COMMAND (running ones unless -a)",
		allHelp: "include ended runs",
		list:    listRuns,
		id:      func(r runRow) string { return r.ID },
		header:  "ID\tSTATE\tAGE\tCOMMAND",
		line: func(r runRow) string {
			// The command is the sandbox's: no tab or newline of it may
			// break the table.
			command := strings.Map(func(r rune) rune {
				if r < ' ' || r == 0x7f {
					return '?'
				}
				return r
			}, r.Command)
			return fmt.Sprintf("%s\t%s\t%s\t%s", r.ID, r.State, time.Duration(r.Age*float64(time.Second)), command)
		},
	}.command(cf)
}

// listRuns lists the Run workflows, running ones unless all.
func listRuns(ctx context.Context, c *berth.Client, all bool) ([]runRow, error) {
	runs, err := c.Runs(ctx, berth.ListOptions{All: all})
	if err != nil {
		return nil, fmt.Errorf("list runs: %s", oneLine(err))
	}
	rows := []runRow{}
	for _, r := range runs {
		rows = append(rows, runRowOf(r))
	}
	return rows, nil
}

// runRowOf is a run's row: its state the workflow's, or, once its
// command ended, "exited N" with the code berth run exits with (and
// why berth ended it, or the signal).
func runRowOf(info berth.RunInfo) runRow {
	r := runRow{ID: info.ID, State: info.Status, Created: info.Created, Command: info.Command}
	r.Age = time.Since(r.Created).Round(time.Second).Seconds()
	if exit := info.Exit; info.Ended {
		code := exitCode(exit)
		r.ExitCode = &code
		if info.Status == "completed" {
			r.State = fmt.Sprintf("exited %d", code)
			switch {
			case exit.Kind != "":
				r.State += " (" + string(exit.Kind) + ")"
			case exit.Signal != "":
				r.State += " (" + exit.Signal + ")"
			}
		}
	}
	return r
}

func newRunCancel(cf *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID...",
		Short: "Cancel runs: each ends, its sandbox destroyed; prints the ids canceled",
		Long: `berth run cancel cancels one-shot runs (berth run --detach, or one whose
berth run is gone) and waits, at most 30s each, for each to end: its
workflow destroys its sandbox on its way out. A run that does not exist
or has already ended is an error (exit 125).`,
		Args:              usageArgs(cobra.MinimumNArgs(1)),
		ValidArgsFunction: completeIDs(cf, runIDs, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			var errs []error
			for _, id := range args {
				if err := cancelRun(ctx, c, id); err != nil {
					fmt.Fprintln(os.Stderr, "berth:", err)
					errs = append(errs, err)
					continue
				}
				fmt.Println(id)
			}
			if len(errs) > 0 {
				return exitError{exitBerth}
			}
			return nil
		},
	}
}

// cancelRun cancels the run id and waits for it to end.
func cancelRun(ctx context.Context, c *berth.Client, id string) error {
	var desc *workflowservice.DescribeWorkflowExecutionResponse
	err := c.Retry(ctx, func(ctx context.Context) error {
		var err error
		desc, err = c.Temporal().DescribeWorkflowExecution(ctx, id, "")
		return err
	})
	switch {
	case temporalerr.WorkflowNotFound(err):
		return fmt.Errorf("%s: run %s does not exist", errdefs.NotFound, id)
	case err != nil:
		return fmt.Errorf("run %s: %s", id, oneLine(err))
	}
	info := desc.GetWorkflowExecutionInfo()
	if t := info.GetType().GetName(); !berth.IsRun(t) {
		return fmt.Errorf("%s: %s is not a run but a %s workflow", errdefs.BadInput, id, t)
	}
	if st := info.GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return fmt.Errorf("%s: run %s has already ended (%s)", errdefs.NotFound, id, strings.ToLower(st.String()))
	}
	if err := c.Retry(ctx, func(ctx context.Context) error { return c.Temporal().CancelWorkflow(ctx, id, "") }); err != nil {
		return fmt.Errorf("run %s: %s", id, oneLine(err))
	}
	wctx, cancel := context.WithTimeout(ctx, cancelWait)
	defer cancel()
	err = c.Retry(wctx, func(ctx context.Context) error {
		return c.Temporal().GetWorkflow(ctx, id, "").Get(ctx, nil)
	})
	var canceled *temporal.CanceledError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("run %s: cancellation requested, the run has not ended after %v (berth logs %s)", id, cancelWait, id)
	case err == nil, errors.As(err, &canceled):
		// Canceled, or ended on its own before the cancellation
		// reached it: either way it is over, and so is its sandbox.
		return nil
	}
	return fmt.Errorf("run %s: %s", id, oneLine(err))
}

func runIDs(ctx context.Context, cf *connFlags) []string {
	c, err := cf.dial(ctx)
	if err != nil {
		return nil
	}
	defer c.Temporal().Close()
	rows, err := listRuns(ctx, c, false)
	if err != nil {
		return nil
	}
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID+"\t"+r.Command)
	}
	return ids
}
