package linux

import (
	"fmt"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
)

// TestKernelLimits checks that a sandbox's commands run under the
// documented limits, from the pool and not, and that the caller can
// change them.
func TestKernelLimits(t *testing.T) {
	const script = `ulimit -n; awk '/Max pending signals/ {print $4}' /proc/self/limits; awk '/Max processes/ {print $3}' /proc/self/limits; cat /proc/sys/user/max_inotify_instances /proc/sys/user/max_inotify_watches /proc/sys/user/max_fanotify_groups /proc/sys/user/max_user_namespaces; df -k /tmp /dev/shm | awk 'NR>1 {print $2}'; cat /proc/self/oom_score_adj`
	for _, tc := range []struct {
		name   string
		limits KernelLimits
		res    provider.Resources
		want   string
	}{
		{"defaults", KernelLimits{}, provider.Resources{},
			fmt.Sprintf("1024 1024 %d 16 8192 0 0 %d %d 1000", 4096-32, (2<<30)/4>>10, (2<<30)/4>>10)},
		{"small sandbox", KernelLimits{}, provider.Resources{Memory: 64 << 20, Pids: 64},
			fmt.Sprintf("1024 1024 %d 16 8192 0 0 %d %d 1000", 64-16, (64<<20)/4>>10, (64<<20)/4>>10)},
		{"changed", KernelLimits{OpenFiles: 100, PendingSignals: 10, InotifyInstances: 2, InotifyWatches: 20, DaemonReserve: 8, TmpFraction: 0.5},
			provider.Resources{Memory: 64 << 20, Pids: 64},
			fmt.Sprintf("100 10 %d 2 20 0 0 %d %d 1000", 64-8, (64<<20)/2>>10, (64<<20)/2>>10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Config{StateDir: shortTempDir(t), Limits: tc.limits})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { destroyAll(t, p) })
			sb := create(t, p, provider.Spec{ID: "limits", Resources: tc.res})
			got := strings.Join(strings.Fields(sh(t, sb, script)), " ")
			if got != tc.want {
				t.Errorf("nofile sigpending nproc inotify-instances inotify-watches fanotify-groups user-namespaces tmp-KiB shm-KiB oom_score_adj:\ngot  %s\nwant %s", got, tc.want)
			}
		})
	}
}
