package cluster_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain runs every test of the package at once, whatever the
// machine's cores (go test's default is GOMAXPROCS): each test has a
// cluster of its own, and spends most of its time waiting out
// heartbeat, host and store timeouts, not on the CPU.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.parallel"); f != nil && !isSet("test.parallel") {
		_ = f.Value.Set("8")
	}
	var err error
	if binDir, err = os.MkdirTemp("", "berth-cluster-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(binDir)
	os.Exit(code)
}

// binDir holds the binaries the tests' clusters run (binaries).
var binDir string

// isSet says whether the command line gave flag name.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
