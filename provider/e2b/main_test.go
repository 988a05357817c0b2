package e2b_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// farm makes the machines of every test's fake.
var farm *remotefake.Farm

// serveEnv, set, makes the test binary an HTTP server on that port: the
// daemon the tests upload into a sandbox and reach through E2B's proxy.
const serveEnv = "E2B_TEST_SERVE_PORT"

func TestMain(m *testing.M) {
	if port := os.Getenv(serveEnv); port != "" {
		serve(port)
		return
	}
	os.Exit(run(m))
}

// serve answers /pid with the process's pid, so a test can tell the
// process that answers is the one it started.
func serve(port string) {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/pid", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, strconv.Itoa(os.Getpid()))
	})
	_ = http.Serve(l, nil)
}

func run(m *testing.M) int {
	if out, err := exec.Command("../remote/remotefake/testdata/build-image.sh").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the image: %v\n%s", err, out)
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
