// Package testkit holds the test helpers every package's tests share:
// waiting for a condition, a free port, a buffer written while read. It
// imports nothing of berth, so that the tests of the packages berthtest
// is built on (the linux provider, its conformance suite, activities)
// can use it too.
package testkit

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// pollEvery is how often Eventually asks again.
const pollEvery = 20 * time.Millisecond

// Eventually waits until cond holds, asking every 20 ms, and fails the
// test if it does not within timeout, saying what it waited for.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
	}
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago:
// whoever binds it may find it taken since, and should try another.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// SyncBuffer is a buffer a process writes while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
