package sandboxd

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOnOwnThreadSparesMainThread: work that chroots its thread never
// does so on the daemon's main thread, whose root is what /proc shows as
// the whole daemon's (the tests find a sandbox's workspace through it).
func TestOnOwnThreadSparesMainThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to chroot")
	}
	dir := t.TempDir()
	mainRoot := fmt.Sprintf("/proc/self/task/%d/root", unix.Getpid())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if err := onOwnThread(func() error { return chrootThread(dir) }); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if root, err := os.Readlink(mainRoot); err != nil || root != "/" {
		t.Fatalf("the main thread's root is %q (%v), want /", root, err)
	}
}
