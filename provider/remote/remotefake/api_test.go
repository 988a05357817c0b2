package remotefake

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/remote"
)

func TestAPI(t *testing.T) {
	t.Parallel()
	a := NewAPI(farm)
	ctx := t.Context()
	run := "run-" + randomHex(4)
	if a.Name() != "remotefake" {
		t.Fatalf("Name %q", a.Name())
	}
	req := remote.CreateRequest{Name: "api-" + randomHex(4), Labels: map[string]string{"run": run, "kind": "one"}}
	// Concurrent Creates under one name make one machine.
	var wg sync.WaitGroup
	ids := make([]string, 3)
	for i := range ids {
		wg.Go(func() {
			m, err := a.Create(ctx, req)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = m.ID
		})
	}
	wg.Wait()
	if ids[0] == "" || ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("Creates under one name gave %q", ids)
	}
	m, err := a.Create(ctx, req)
	if err != nil || m.ID != ids[0] || m.Name != req.Name || m.State != remote.MachineRunning || m.Labels["kind"] != "one" {
		t.Fatalf("Create again: %+v, %v", m, err)
	}
	other, err := a.Create(ctx, remote.CreateRequest{Name: "api-" + randomHex(4), Labels: map[string]string{"run": run, "kind": "two"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("find and list", func(t *testing.T) {
		if got, err := a.Find(ctx, req.Name); err != nil || got.ID != m.ID {
			t.Fatalf("Find: %+v, %v", got, err)
		}
		fm, err := farm.Machine(other.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := fm.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := a.Find(ctx, other.Name)
		fm.Resume(ctx)
		if err != nil || got.State != remote.MachinePaused {
			t.Fatalf("Find of a paused machine: %+v, %v; want state paused", got, err)
		}
		if _, err := a.Find(ctx, "no-such-machine"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Find of no machine: %v, want ErrNotFound", err)
		}
		for _, c := range []struct {
			labels map[string]string
			want   []string
		}{
			{map[string]string{"run": run}, []string{m.ID, other.ID}},
			{map[string]string{"run": run, "kind": "two"}, []string{other.ID}},
			{map[string]string{"run": run, "kind": "three"}, nil},
		} {
			list, err := a.List(ctx, c.labels)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, x := range list {
				got = append(got, x.ID)
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("List(%v) = %v, want %v", c.labels, got, c.want)
			}
		}
	})
	t.Run("upload, start and endpoint", func(t *testing.T) {
		// A server uploaded and started detached, reached through the
		// endpoint.
		prog := `import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = (os.environ["GREETING"] + " " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
http.server.HTTPServer(("127.0.0.1", 8123), H).serve_forever()
`
		if err := a.Upload(ctx, m, "/opt/berth/server.py", strings.NewReader(prog)); err != nil {
			t.Fatal(err)
		}
		fm, err := farm.Machine(m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if out, _, _ := runCmd(t, fm, Command{Argv: []string{"stat", "-c", "%a", "/opt/berth/server.py"}}); out != "755\n" {
			t.Fatalf("the uploaded file's mode: %q", out)
		}
		sctx, cancel := context.WithCancel(ctx)
		err = a.Start(sctx, m, []string{"python3", "/opt/berth/server.py"}, map[string]string{"GREETING": "hello"})
		cancel() // the server outlives the call's context
		if err != nil {
			t.Fatal(err)
		}
		ep, err := a.Endpoint(ctx, m, 8123)
		if err != nil {
			t.Fatal(err)
		}
		if ep.URL != "http://"+m.ID || !strings.HasPrefix(m.ID, "m-") {
			t.Fatalf("endpoint URL %q of machine %q", ep.URL, m.ID)
		}
		hc := &http.Client{Transport: ep.Transport, Timeout: 10 * time.Second}
		var body string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err := hc.Get(ep.URL + "/x")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server does not answer: %v", err)
			}
		}
		if body != "hello /x" {
			t.Fatalf("the server answers %q", body)
		}
		if err := a.KeepAlive(ctx, m, time.Hour); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("delete", func(t *testing.T) {
		for range 2 {
			if err := a.Delete(ctx, other); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.Find(ctx, other.Name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Find after Delete: %v, want ErrNotFound", err)
		}
		if _, err := farm.Machine(other.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("the farm's machine after Delete: %v, want ErrNotFound", err)
		}
		if list, _ := a.List(ctx, map[string]string{"run": run}); len(list) != 1 || list[0].ID != m.ID {
			t.Fatalf("List after Delete: %+v", list)
		}
		if _, err := a.Endpoint(ctx, other, 8123); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Endpoint after Delete: %v, want ErrNotFound", err)
		}
		again, err := a.Create(ctx, remote.CreateRequest{Name: other.Name})
		if err != nil {
			t.Fatal(err)
		}
		if again.ID == other.ID {
			t.Fatal("Create after Delete returned the deleted machine")
		}
		a.Delete(ctx, again)
	})
	if err := a.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
}

func TestAPIRefuses(t *testing.T) {
	t.Parallel()
	a := NewAPI(farm)
	for _, req := range []remote.CreateRequest{
		{Name: ""},
		{Name: strings.Repeat("n", maxName+1)},
		{Name: "x", Image: "no-such-image"},
		{Name: "x", Labels: map[string]string{"": "v"}},
	} {
		if _, err := a.Create(t.Context(), req); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("Create(%.40v): %v, want ErrBadInput", req, err)
		}
	}
}
