package agentcore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// The tests' farm of machines, and the daemon they upload, built once.
var (
	farm   *remotefake.Farm
	daemon string
)

// The fake's credentials.
const (
	testKeyID  = "AKIABERTHTESTKEY0001"
	testSecret = "berth/test/secret/access/key/0123456789"
	testRegion = "us-west-2"
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if out, err := exec.Command("../remote/remotefake/testdata/build-image.sh").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the machines' image: %v\n%s", err, out)
		return 1
	}
	dir, err := os.MkdirTemp("", "berth-agentcore-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if daemon, err = remotetest.BuildDaemon(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if farm, err = remotefake.NewFarm(context.Background(), remotefake.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer farm.Close()
	return m.Run()
}
