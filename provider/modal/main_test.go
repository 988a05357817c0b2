package modal_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// The tests' farm of machines, and the daemon they upload, built once.
var (
	farm   *remotefake.Farm
	daemon string
)

// The fake's token.
const (
	testTokenID     = "ak-berth-test-0123456789"
	testTokenSecret = "as-berth-test-secret-0123456789"
)

// serveEnv, set, makes the test binary an HTTP server on that port.
const serveEnv = "MODAL_TEST_SERVE_PORT"

func TestMain(m *testing.M) {
	if port := os.Getenv(serveEnv); port != "" {
		serve(port)
		return
	}
	if arg := os.Getenv(childHibernateEnv); arg != "" {
		hibernateChild(arg)
		return
	}
	os.Exit(run(m))
}

// serve answers /pid with the process's pid and its uid.
func serve(port string) {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/pid", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, strconv.Itoa(os.Getpid())+" "+strconv.Itoa(os.Getuid()))
	})
	_ = http.Serve(l, nil)
}

func run(m *testing.M) int {
	if out, err := exec.Command("../remote/remotefake/testdata/build-image.sh").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the machines' image: %v\n%s", err, out)
		return 1
	}
	dir, err := os.MkdirTemp("", "berth-modal-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// No profile of the machine's reaches the SDK.
	os.Setenv("MODAL_CONFIG_PATH", filepath.Join(dir, "no-modal.toml"))
	os.Unsetenv("MODAL_SERVER_URL")
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
