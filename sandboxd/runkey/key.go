package runkey

import (
	"errors"
	"fmt"
	"strings"
)

// MaxKeyLen bounds a key, so that DIR/KEY stays a valid file name.
const MaxKeyLen = 200

// ValidKey reports why key cannot name a journal entry: it must be 1 to
// MaxKeyLen printable ASCII bytes, with no '/', no "..", and no leading
// '.' (the journal's own temporary names begin with one).
func ValidKey(key string) error {
	switch {
	case key == "":
		return errors.New("an empty key")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("a key of %d bytes, more than %d", len(key), MaxKeyLen)
	case strings.Contains(key, "/"):
		return fmt.Errorf("key %q has a '/'", key)
	case strings.Contains(key, ".."):
		return fmt.Errorf("key %q has a '..'", key)
	case key[0] == '.':
		return fmt.Errorf("key %q begins with '.'", key)
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return fmt.Errorf("key %q has a byte that is not printable ASCII at %d", key, i)
		}
	}
	return nil
}
