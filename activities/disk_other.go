//go:build !(linux || darwin)

package activities

import "errors"

// diskSpace cannot tell here: a host with a disk bound (Capacity.DiskDir)
// takes no sandbox, which says so.
func diskSpace(string) (size, free int64, err error) {
	return 0, 0, errors.New("free disk space is not known on this system")
}
