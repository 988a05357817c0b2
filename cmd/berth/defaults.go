package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
)

// What a sandbox gets when its settings name none: the self-hosted
// providers' defaults, unless the host's --provider-config sets others.
// The flags' help and inspect say the same, from here.
const (
	defaultCPU    = "unlimited"
	defaultMemory = "2Gi"
	defaultDisk   = "10Gi"
	defaultPids   = "4096"
)

// defaultTimeout is a command's timeout when it names none, as 10m.
var defaultTimeout = strings.TrimSuffix(berth.DefaultExecTimeout.String(), "0s")

// asked shows a resource as asked for: its value, or, for 0, the
// default it stands for.
func asked(v, dflt string) string {
	if v == "0" {
		return fmt.Sprintf("0 (the provider's default: %s)", dflt)
	}
	return v
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
