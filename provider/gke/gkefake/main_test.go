package gkefake

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// farm makes the machines of every test's fake.
var farm *remotefake.Farm

// serveEnv, set, makes the test binary an HTTP server on that port in a
// machine, reached through the port forward.
const serveEnv = "GKEFAKE_TEST_SERVE_PORT"

const testToken = "gkefake-test-token-0123456789"

func TestMain(m *testing.M) {
	if port := os.Getenv(serveEnv); port != "" {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		http.HandleFunc("/pid", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%d %s", os.Getpid(), r.Header.Get("Authorization"))
		})
		_ = http.Serve(l, nil)
		return
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if out, err := exec.Command("../../remote/remotefake/testdata/build-image.sh").CombinedOutput(); err != nil {
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
