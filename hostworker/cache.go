package hostworker

import (
	"os"

	"go.temporal.io/sdk/worker"
)

// Workflow cache bounds. A host keeps the workflows it ran last in
// memory between their tasks (the SDK's sticky cache), so that their
// next task does not replay their history; each costs its state and
// its coroutines' stacks, whether its sandbox runs or hibernates. A
// workflow not kept is replayed from its history on its next task, on
// whichever host takes it: a few milliseconds for an idle session's.
const (
	// WorkflowCacheMemory is the share of a host's memory its workflow
	// cache may take by default, as a divisor: a 128th (1,536 workflows
	// on a host of 24 GiB).
	WorkflowCacheMemory = 128
	// CachedWorkflowCost is what one cached workflow costs, for sizing
	// the cache: an idle agent session's, with a margin (95 KiB of the
	// worker's own memory and 4 goroutines measured; docs/cluster.md,
	// "Scale").
	CachedWorkflowCost = 128 << 10
	// MinWorkflowCache and MaxWorkflowCache bound the default: the
	// SDK's own default is the maximum.
	MinWorkflowCache = 100
	MaxWorkflowCache = 10_000
)

// DefaultWorkflowCache is how many workflows a host with memory bytes
// keeps cached by default: WorkflowCacheMemory's share of it, at
// CachedWorkflowCost each, within MinWorkflowCache and
// MaxWorkflowCache; MinWorkflowCache when memory is unknown (0).
func DefaultWorkflowCache(memory int64) int {
	return int(min(max(memory/WorkflowCacheMemory/CachedWorkflowCost, MinWorkflowCache), MaxWorkflowCache))
}

// HostMemory is the host's memory (MemTotal in /proc/meminfo), or 0
// where it cannot be read.
func HostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	total, _ := memTotal(b)
	return total
}

// SetWorkflowCache bounds the workflows the process keeps cached, for
// every worker it starts: n, or DefaultWorkflowCache(HostMemory()) when
// n is 0. The SDK's cache is the process's, not a worker's: it is set
// once, before any worker starts.
func SetWorkflowCache(n int) int {
	if n <= 0 {
		n = DefaultWorkflowCache(HostMemory())
	}
	worker.SetStickyWorkflowCacheSize(n)
	return n
}
