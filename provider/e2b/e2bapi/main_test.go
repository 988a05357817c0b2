package e2bapi_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider/e2b/e2bapi"
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// farm makes the machines of every test's fake.
var farm *remotefake.Farm

func TestMain(m *testing.M) { os.Exit(run(m)) }

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

// testKey is the fake's API key; no error may ever hold it.
const testKey = "e2b_53cr3t0f7h3735750nly"

// newFake starts a fake that fails the test if a request or answer broke
// the spec, and a client of it.
func newFake(t *testing.T, opts e2bfake.Options) (*e2bfake.Server, *e2bapi.Client) {
	t.Helper()
	opts.Farm = farm
	if opts.APIKey == "" {
		opts.APIKey = testKey
	}
	f, err := e2bfake.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			t.Errorf("spec violations:\n%s", strings.Join(v, "\n"))
		}
	})
	c, err := e2bapi.New(e2bapi.Options{APIURL: f.URL(), SandboxURL: f.SandboxURL(), APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

// noKey fails the test when err's message holds the API key.
func noKey(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), testKey) {
		t.Errorf("the error holds the API key: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("the error is not one line: %q", err)
	}
}
