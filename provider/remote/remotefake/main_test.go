package remotefake

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// farm is the package's tests' farm; a test that needs one of its own
// (Close) makes it.
var farm *Farm

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if out, err := exec.Command("testdata/build-image.sh").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the image: %v\n%s", err, out)
		return 1
	}
	var err error
	farm, err = NewFarm(context.Background(), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer farm.Close()
	return m.Run()
}
