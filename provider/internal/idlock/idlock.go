// Package idlock serialises the creation and destruction of each sandbox
// across threads and processes, with byte-range locks on one lock file
// beside the sandboxes: no file is made or removed per sandbox.
package idlock

import (
	"fmt"
	"hash/fnv"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Create makes the lock file if it does not exist.
func Create(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// Lock takes the lock of one sandbox id on file, waiting for it; unlock
// releases it. The lock is at a place of the file chosen by the id: two
// ids may share a place, and then wait for each other, which is
// harmless.
func Lock(file, id string) (unlock func(), err error) {
	// Open file description locks belong to the open file, not the
	// process: each caller opens its own so callers exclude each other.
	f, err := os.OpenFile(file, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(h.Sum32() % (1 << 20)), Len: 1}
	for {
		err = unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", id, err)
	}
	return func() { f.Close() }, nil // closing the description releases its locks
}
