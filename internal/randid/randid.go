// Package randid makes the random ids berth names things by: sandboxes,
// commands, snapshots, workflows, temporary files. They are random, not
// derived, so that two of anything are never confused; crypto/rand
// makes them unguessable as well.
package randid

import (
	"crypto/rand"
	"encoding/hex"
)

// Hex returns n random bytes in lower-case hex (2n characters).
func Hex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails: it panics on a broken system source
	return hex.EncodeToString(b)
}
