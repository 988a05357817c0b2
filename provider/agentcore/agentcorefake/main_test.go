package agentcorefake

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

var farm *remotefake.Farm

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if out, err := exec.Command("../../remote/remotefake/testdata/build-image.sh").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the machines' image: %v\n%s", err, out)
		return 1
	}
	var err error
	if farm, err = remotefake.NewFarm(context.Background(), remotefake.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer farm.Close()
	return m.Run()
}
