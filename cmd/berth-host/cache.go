package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/hostworker"
)

// cacheFlag is --workflow-cache: how many workflows the process keeps
// in memory between their tasks.
type cacheFlag struct{ n int }

func (f *cacheFlag) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.n, "workflow-cache", 0, fmt.Sprintf(
		"workflows kept in memory between their tasks; one not kept is replayed from its history at its next task (default: a %dth of the host's memory at %d KiB each, from %d to %d)",
		hostworker.WorkflowCacheMemory, hostworker.CachedWorkflowCost>>10, hostworker.MinWorkflowCache, hostworker.MaxWorkflowCache))
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if f.n < 0 {
			return usageError{fmt.Errorf("--workflow-cache %d: want 1 or more, or 0 for the default", f.n)}
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}

// apply sets the process's cache, before any worker starts, and says
// its size.
func (f *cacheFlag) apply() int { return hostworker.SetWorkflowCache(f.n) }
