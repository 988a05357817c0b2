package modalfake

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// farm makes the machines of every test's fake.
var farm *remotefake.Farm

// serveEnv, set, makes the test binary an HTTP server on that port: the
// server the tests upload into a sandbox and reach through its tunnel.
const serveEnv = "MODALFAKE_TEST_SERVE_PORT"

const (
	testTokenID     = "ak-modalfake-test"
	testTokenSecret = "as-modalfake-test-secret"
)

func TestMain(m *testing.M) {
	if port := os.Getenv(serveEnv); port != "" {
		serve(port)
		return
	}
	os.Exit(run(m))
}

// serve answers /pid with the process's pid.
func serve(port string) {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/pid", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d", os.Getpid())
	})
	_ = http.Serve(l, nil)
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

// newFake starts a fake for the test, closed at its end, when the test
// fails for every violation it recorded.
func newFake(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Farm, opts.TokenID, opts.TokenSecret = farm, testTokenID, testTokenSecret
	f, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			t.Errorf("violations:\n%s", strings.Join(v, "\n"))
		}
	})
	return f
}

// client is the official SDK's client of f, with the token given.
func client(t *testing.T, f *Server, id, secret string) *modal.Client {
	t.Helper()
	t.Setenv("MODAL_SERVER_URL", f.URL())
	t.Setenv("MODAL_CONFIG_PATH", t.TempDir()+"/none.toml")
	c, err := modal.NewClientWithOptions(&modal.ClientParams{TokenID: id, TokenSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
