package modalfake

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sandbox makes a sandbox through the SDK, with port 8080 tunnelled.
func newSandbox(t *testing.T, c *modal.Client, name string, tags map[string]string) *modal.Sandbox {
	t.Helper()
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "fake-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("python:3.12-slim", nil).DockerfileCommands([]string{"RUN true"}, nil)
	sb, err := c.Sandboxes.ExperimentalCreate(ctx, app, img, &modal.SandboxCreateParams{
		Name: name, Tags: tags, EncryptedPorts: []int{8080}, Timeout: 10 * time.Minute, CPU: 0.5, MemoryMiB: 256,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// execute runs argv in sb through the SDK, with stdin, and returns its
// output and exit code.
func execute(t *testing.T, sb *modal.Sandbox, stdin string, env map[string]string, argv ...string) (string, string, int) {
	t.Helper()
	ctx := t.Context()
	cp, err := sb.Exec(ctx, argv, &modal.SandboxExecParams{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	for b := []byte(stdin); len(b) > 0; {
		n := min(len(b), 1<<20)
		if _, err := cp.Stdin.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := cp.Stdin.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(cp.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := io.ReadAll(cp.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	code, err := cp.Wait(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), string(errOut), code
}

// TestSandbox drives a sandbox's life through the SDK: made with a name
// and tags, found by name and by tags, its commands run for real (their
// output, input, environment and exit code), its name unique, and gone
// once terminated.
func TestSandbox(t *testing.T) {
	f := newFake(t, Options{})
	c := client(t, f, testTokenID, testTokenSecret)
	ctx := t.Context()
	sb := newSandbox(t, c, "one", map[string]string{"owner": "test", "n": "1"})

	out, errOut, code := execute(t, sb, "from stdin\n", map[string]string{"GREETING": "hello"},
		"sh", "-c", `echo "$GREETING $(id -u)"; cat; echo oops >&2; exit 3`)
	if out != "hello 0\nfrom stdin\n" || errOut != "oops\n" || code != 3 {
		t.Errorf("exec: stdout %q stderr %q code %d", out, errOut, code)
	}
	big := strings.Repeat("0123456789abcdef", 300<<10/16) // several output chunks
	if out, _, code := execute(t, sb, big, nil, "cat"); out != big || code != 0 {
		t.Errorf("cat of %d bytes: %d bytes back, code %d", len(big), len(out), code)
	}

	got, err := c.Sandboxes.ExperimentalFromName(ctx, "fake-test", "one", nil)
	if err != nil || got.SandboxID != sb.SandboxID {
		t.Fatalf("from name: %v, %v", got, err)
	}
	tags, err := got.GetTags(ctx, nil)
	if err != nil || tags["owner"] != "test" || tags["n"] != "1" {
		t.Errorf("tags %v, %v", tags, err)
	}
	_ = newSandbox(t, c, "two", map[string]string{"owner": "test", "n": "2"})
	app, err := c.Apps.FromName(ctx, "fake-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := c.Sandboxes.ExperimentalList(ctx, &modal.SandboxExperimentalListParams{AppID: app.AppID, Tags: map[string]string{"owner": "test", "n": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for s, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.SandboxID)
	}
	if len(ids) != 1 || ids[0] != sb.SandboxID {
		t.Errorf("list by tags: %v, want [%s]", ids, sb.SandboxID)
	}

	img := c.Images.FromRegistry("python:3.12-slim", nil)
	_, err = c.Sandboxes.ExperimentalCreate(ctx, app, img, &modal.SandboxCreateParams{Name: "one"})
	var exists modal.AlreadyExistsError
	if !errors.As(err, &exists) {
		t.Errorf("a second sandbox named one: %v, want AlreadyExists", err)
	}

	if _, err := sb.Terminate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sandboxes.ExperimentalFromName(ctx, "fake-test", "one", nil); !errors.As(err, new(modal.NotFoundError)) {
		t.Errorf("from name after terminate: %v, want NotFound", err)
	}
	if _, err := farm.Machine(sb.SandboxID); err == nil {
		t.Error("the terminated sandbox's machine is still there")
	}
	if n := f.Sandboxes(); n != 1 {
		t.Errorf("%d sandboxes running, want 1", n)
	}
	if f.Requests("SandboxCreateV2") != 3 || f.Requests("TaskExecStart") != 2 {
		t.Errorf("requests: %d creates, %d execs", f.Requests("SandboxCreateV2"), f.Requests("TaskExecStart"))
	}
}

// TestAuth: a wrong token is refused on every call, and counted.
func TestAuth(t *testing.T) {
	f := newFake(t, Options{})
	c := client(t, f, testTokenID, "as-wrong")
	_, err := c.Apps.FromName(t.Context(), "x", &modal.AppFromNameParams{CreateIfMissing: true})
	if status.Code(errors.Unwrap(err)) != codes.Unauthenticated && !strings.Contains(err.Error(), "Unauthenticated") {
		t.Errorf("wrong secret: %v, want Unauthenticated", err)
	}
	if f.Requests("unauthenticated") == 0 {
		t.Error("no call counted as unauthenticated")
	}
}

// TestFaults: an injected code reaches the SDK's caller; a lost answer
// of a create is retried by the SDK and then finds the name taken, one
// sandbox made; a quota refuses what passes it.
func TestFaults(t *testing.T) {
	f := newFake(t, Options{Quota: Quota{Sandboxes: 1}})
	c := client(t, f, testTokenID, testTokenSecret)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "fake-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("alpine", nil)
	f.Inject(Fault{Method: "SandboxCreateV2", Code: codes.InvalidArgument, Message: "bad cpu"})
	_, err = c.Sandboxes.ExperimentalCreate(ctx, app, img, &modal.SandboxCreateParams{Name: "a"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("injected InvalidArgument: %v", err)
	}
	f.Inject(Fault{Method: "SandboxCreateV2", Drop: true})
	_, err = c.Sandboxes.ExperimentalCreate(ctx, app, img, &modal.SandboxCreateParams{Name: "a"})
	if !errors.As(err, new(modal.AlreadyExistsError)) {
		t.Errorf("create after a lost answer: %v, want AlreadyExists from the SDK's retry", err)
	}
	if n := f.Sandboxes(); n != 1 {
		t.Errorf("%d sandboxes, want 1", n)
	}
	_, err = c.Sandboxes.ExperimentalCreate(ctx, app, img, &modal.SandboxCreateParams{Name: "b"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("past the quota: %v, want ResourceExhausted", err)
	}
}

// TestTunnel: a server started in the sandbox answers through the
// tunnel's https URL, with the fake's CA; once the sandbox vanishes its
// calls answer NotFound.
func TestTunnel(t *testing.T) {
	f := newFake(t, Options{})
	c := client(t, f, testTokenID, testTokenSecret)
	ctx := t.Context()
	sb := newSandbox(t, c, "tunnel", nil)
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, code := execute(t, sb, string(self), nil, "sh", "-c", "cat > /srv && chmod 755 /srv"); code != 0 {
		t.Fatalf("upload: code %d", code)
	}
	if _, _, code := execute(t, sb, "", map[string]string{serveEnv: "8080"}, "sh", "-c", "nohup /srv </dev/null >/dev/null 2>&1 &"); code != 0 {
		t.Fatalf("start: code %d", code)
	}
	tunnels, err := sb.Tunnels(ctx, 10*time.Second, nil)
	if err != nil || tunnels[8080] == nil {
		t.Fatalf("tunnels %v, %v", tunnels, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.CAPEM())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	var body []byte
	for i := 0; ; i++ {
		resp, err := hc.Get(tunnels[8080].URL() + "/pid")
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if i == 50 {
			t.Fatalf("through the tunnel: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := strconv.Atoi(string(bytes.TrimSpace(body))); err != nil {
		t.Errorf("/pid answered %q", body)
	}
	if f.Requests("tunnel") == 0 {
		t.Error("no tunnel connection counted")
	}
	if err := f.Vanish(sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.GetTags(context.WithoutCancel(ctx), nil); status.Code(err) != codes.NotFound {
		t.Errorf("tags of a vanished sandbox: %v, want NotFound", err)
	}
}
