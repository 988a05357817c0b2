package netns

import (
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
)

// In runs f on an OS thread that is in the network namespace ns, so
// that the sockets f opens and the /proc/sys/net files it writes are
// that namespace's. The thread is given back only once it is back in
// the namespace it came from; otherwise it dies with the goroutine.
func In(ns netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- ferr // the thread stays locked and exits with this goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// writeSysctl writes a /proc/sys file as seen from the namespace ns.
func writeSysctl(ns netns.NsHandle, path, value string) error {
	return In(ns, func() error {
		return os.WriteFile(path, []byte(value), 0)
	})
}
