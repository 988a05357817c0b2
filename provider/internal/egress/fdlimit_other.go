//go:build !unix

package egress

func fdLimit() (uint64, bool) { return 0, false }
