package daytonafake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/daytonaio/daytona/libs/sdk-go/pkg/daytona"
	sdkerrors "github.com/daytonaio/daytona/libs/sdk-go/pkg/errors"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/types"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// farm makes the machines of every test's fake.
var farm *remotefake.Farm

// serveEnv, set, makes the test binary an HTTP server on that port: the
// daemon the tests upload into a sandbox and reach through the preview
// proxy.
const serveEnv = "DAYTONAFAKE_TEST_SERVE_PORT"

const testKey = "dtn_test_key"

func TestMain(m *testing.M) {
	if port := os.Getenv(serveEnv); port != "" {
		serve(port)
		return
	}
	os.Exit(run(m))
}

// serve answers /pid with the process's pid, and /stream with a line
// every 100ms until the client goes, flushed as it is written.
func serve(port string) {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/pid", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d %s", os.Getpid(), r.URL.RawQuery)
	})
	http.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
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
// fails if anything broke the documents.
func newFake(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Farm = farm
	if opts.APIKey == "" {
		opts.APIKey = testKey
	}
	s, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ids := s.Sandboxes()
		s.Close()
		for _, id := range ids {
			if _, err := farm.Machine(id); err == nil {
				t.Errorf("the machine of sandbox %s outlived Close", id)
			}
		}
		if v := s.Violations(); len(v) > 0 {
			t.Errorf("spec violations: %q", v)
		}
		if left := s.Sandboxes(); len(left) > 0 {
			t.Errorf("sandboxes left after Close: %v", left)
		}
	})
	return s
}

// newClient is the official SDK's client of the fake.
func newClient(t *testing.T, s *Server, key string) *daytona.Client {
	t.Helper()
	if key == "" {
		key = testKey
	}
	c, err := daytona.NewClientWithConfig(&types.DaytonaConfig{APIKey: key, APIUrl: s.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// create makes a sandbox with the SDK, waiting until it is started, and
// deletes it at the test's end.
func create(t *testing.T, c *daytona.Client, params any) *daytona.Sandbox {
	t.Helper()
	sb, err := c.Create(t.Context(), params, withTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Delete(context.Background()) })
	return sb
}

// status is the HTTP status an SDK error carries, or 0.
func status(err error) int {
	var nf *sdkerrors.DaytonaNotFoundError
	var rl *sdkerrors.DaytonaRateLimitError
	var de *sdkerrors.DaytonaError
	switch {
	case errors.As(err, &nf):
		return nf.StatusCode
	case errors.As(err, &rl):
		return rl.StatusCode
	case errors.As(err, &de):
		return de.StatusCode
	}
	return 0
}

// headersOf is the headers of the answer an SDK error came of.
func headersOf(err error) http.Header {
	var nf *sdkerrors.DaytonaNotFoundError
	var rl *sdkerrors.DaytonaRateLimitError
	var de *sdkerrors.DaytonaError
	switch {
	case errors.As(err, &nf):
		return nf.Headers
	case errors.As(err, &rl):
		return rl.Headers
	case errors.As(err, &de):
		return de.Headers
	}
	return nil
}

// message is the message an SDK error carries.
func message(err error) string {
	var nf *sdkerrors.DaytonaNotFoundError
	var rl *sdkerrors.DaytonaRateLimitError
	var de *sdkerrors.DaytonaError
	switch {
	case errors.As(err, &nf):
		return nf.Message
	case errors.As(err, &rl):
		return rl.Message
	case errors.As(err, &de):
		return de.Message
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// waitState waits until the fake says the sandbox is in state.
func waitState(t *testing.T, s *Server, id, state string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for s.State(id) != state {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %q after %v, want %q", id, s.State(id), within, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }
