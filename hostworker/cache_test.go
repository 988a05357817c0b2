package hostworker

import "testing"

func TestDefaultWorkflowCache(t *testing.T) {
	for _, c := range []struct {
		memory int64
		want   int
	}{
		{0, MinWorkflowCache},       // unknown
		{1 << 30, MinWorkflowCache}, // a small host: the floor
		{24 << 30, 1536},            // this project's machine
		{1 << 40, MaxWorkflowCache}, // the SDK's own default at most
	} {
		if got := DefaultWorkflowCache(c.memory); got != c.want {
			t.Errorf("DefaultWorkflowCache(%d) = %d, want %d", c.memory, got, c.want)
		}
	}
}
