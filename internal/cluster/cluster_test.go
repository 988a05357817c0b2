package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/workflows"
)

// The cluster's settings: the workers' heartbeat timeout (cluster.sh
// passes it) and the host timeout of a standalone sandbox's operations
// (sandbox.DefaultHostTimeout), which together bound how long a lost
// host goes unnoticed.
const (
	heartbeat   = 5 * time.Second
	hostTimeout = time.Minute
)

// cluster is one brought up by examples/cluster.sh.
type cluster struct {
	script  string
	env     []string
	dir     string
	address string // the Temporal frontend's, on the cluster's bridge
}

// run runs the script with args; its output goes to the test's log.
func (c *cluster) run(t *testing.T, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	t.Logf("cluster.sh %s:\n%s", strings.Join(args, " "), bytes.TrimSpace(out))
	if err != nil {
		return fmt.Errorf("cluster.sh %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// logs shows the tail of every log of the cluster, for a failure.
func (c *cluster) logs(t *testing.T) {
	for _, name := range []string{"server.log", "h1.log", "h2.log", "h3.log", "s3.log"} {
		b, err := os.ReadFile(filepath.Join(c.dir, name))
		if err != nil {
			continue
		}
		t.Logf("%s:\n%s", name, b[max(0, len(b)-6<<10):])
	}
}

// clusters counts the clusters this process brought up, for their names.
var clusters atomic.Int32

// binaries builds, once for all the tests, berth-host as the other
// tests build it (its build is cached with theirs) and the in-sandbox
// daemon static, as README builds it, into a directory TestMain removes.
var binaries = sync.OnceValues(func() (string, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(binDir, "bin")
	for _, b := range []struct{ pkg, cgo string }{{"./cmd/berth-host", "1"}, {"./cmd/berth-sandboxd", "0"}} {
		build := exec.Command("go", "build", "-o", bin+"/", b.pkg)
		build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return bin, nil
})

// up brings a cluster up, with names, addresses and ports of its own,
// and brings it down when the test ends, whatever happened; env are
// settings of cluster.sh's for this cluster.
//
// The tests run in parallel, each on a cluster of its own: most of their
// time is spent waiting out heartbeat and host timeouts.
func up(t *testing.T, env ...string) *cluster {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Fatal("the cluster needs Linux and root (network namespaces, cgroups, loop devices); .ci/run runs as root")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	// The postgres user must reach its directory: not below t.TempDir,
	// which only root may enter.
	dir, err := os.MkdirTemp("", "berth-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	// Ports free on loopback are free on the bridge too, unless a
	// process listens on every address, which would take them there.
	id := os.Getpid()%10_000*10 + int(clusters.Add(1)%10)
	net, port := fmt.Sprintf("100.87.%d", 10+id%240), testkit.FreePort(t)
	c := &cluster{
		script:  filepath.Join(root, "examples", "cluster.sh"),
		dir:     dir,
		address: fmt.Sprintf("%s.1:%d", net, port),
		env: append(os.Environ(),
			"CLUSTER_DIR="+dir,
			fmt.Sprintf("CLUSTER_NAME=bc%d", id),
			"CLUSTER_NET="+net,
			fmt.Sprintf("CLUSTER_TEMPORAL_PORT=%d", port),
			fmt.Sprintf("CLUSTER_S3_PORT=%d", testkit.FreePort(t)),
			fmt.Sprintf("CLUSTER_PG_PORT=%d", testkit.FreePort(t)),
			"CLUSTER_HEARTBEAT="+heartbeat.String(),
			"BERTH_BIN="+bin,
			"PATH="+os.Getenv("PATH")+":"+filepath.Join(goEnv(t, "GOPATH"), "bin"),
		),
	}
	c.env = append(c.env, env...)
	t.Cleanup(func() {
		if t.Failed() {
			c.logs(t)
		}
		// Twice: down is idempotent, and leaves nothing behind.
		for range 2 {
			if err := c.run(t, "down"); err != nil {
				t.Error(err)
			}
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("down left %s: %v", dir, err)
			_ = os.RemoveAll(dir)
		}
	})
	began := time.Now()
	if err := c.run(t, "up"); err != nil {
		t.Fatal(err)
	}
	t.Logf("up in %v", time.Since(began).Round(time.Millisecond))
	if err := c.run(t, "status"); err != nil {
		t.Fatal(err)
	}
	return c
}

func goEnv(t *testing.T, name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// hostOf is the host queue a sandbox's workflow names in its memo.
func hostOf(ctx context.Context, t *testing.T, tc client.Client, id string) string {
	t.Helper()
	d, err := tc.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	var q string
	if p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoQueue]; p != nil {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &q); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

func sh(line string) ([]string, berth.ExecOptions) { return nil, berth.ExecOptions{Shell: line} }

func execOK(ctx context.Context, t *testing.T, s *berth.Sandbox, line string) string {
	t.Helper()
	argv, opts := sh(line)
	res, err := s.Exec(ctx, argv, opts)
	if err != nil {
		t.Fatalf("%s: exec %q: %v", s.ID(), line, err)
	}
	if !res.OK() {
		t.Fatalf("%s: exec %q: exit %d %s %s: %s", s.ID(), line, res.ExitCode, res.Kind, res.Message, res.Stderr)
	}
	return string(res.Stdout)
}

// TestCluster: berth on a real cluster on this machine. Sandboxes
// created through the SDK spread over three hosts and run commands
// and keep files; the Temporal server is killed and started again on
// the same PostgreSQL under a command, which completes; a host is then
// lost for good (its worker killed with SIGKILL with everything it
// ran, its namespace deleted) under a command in flight: within the
// heartbeat and host timeouts the sandbox's workflow finds it lost,
// the command fails as SandboxLost without running again, the sandbox
// is re-created on another host from its checkpoint in S3, the file
// written since is named as lost, and the other sandboxes answer.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := up(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	tc, bc := c.dial(ctx, t)

	// Sandboxes spread over the hosts, and each runs and keeps files.
	const n = 6
	sbxs := make([]*berth.Sandbox, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range sbxs {
		wg.Go(func() {
			sbxs[i], errs[i] = bc.Sandboxes().Create(ctx, berth.SandboxOptions{
				ID: fmt.Sprintf("cluster-%d", i), IdleTimeout: berth.Never, HibernateAfter: berth.Never,
			})
		})
	}
	began := time.Now()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sandboxes created in %v", n, time.Since(began).Round(time.Millisecond))
	hosts := map[string][]*berth.Sandbox{}
	for _, s := range sbxs {
		if err := s.WriteFiles(ctx, berth.File{Path: "who", Data: []byte(s.ID())}); err != nil {
			t.Fatal(err)
		}
		if got := execOK(ctx, t, s, "cat who"); got != s.ID() {
			t.Errorf("%s: cat who = %q", s.ID(), got)
		}
		h := hostOf(ctx, t, tc, s.ID())
		hosts[h] = append(hosts[h], s)
	}
	t.Logf("placement: %d hosts: %v", len(hosts), placement(hosts))
	if len(hosts) < 2 {
		t.Errorf("%d sandboxes all on %v; want them spread over the hosts", n, placement(hosts))
	}

	// The server killed under a command and started again on the same
	// database: the client waits, and the command runs once.
	other := sbxs[0]
	done := make(chan error, 1)
	go func() {
		argv, opts := sh("echo once >> server-restart; sleep 3; cat server-restart")
		res, err := other.Exec(ctx, argv, opts)
		if err == nil && string(res.Stdout) != "once\n" {
			err = fmt.Errorf("output %q, want one line", res.Stdout)
		}
		done <- err
	}()
	testkit.Eventually(t, "the command to run", 30*time.Second, func() bool {
		_, err := other.ReadFile(ctx, "server-restart")
		return err == nil
	})
	if err := c.run(t, "kill-server"); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	if err := c.run(t, "start-server"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a command across the server's restart: %v", err)
	}
	t.Logf("server restart: the command completed %v after the kill", time.Since(began).Round(time.Millisecond))

	// The victim: a file checkpointed (a hibernation stores its
	// workspace in S3), one written after, and a command in flight.
	victim := sbxs[n-1]
	if err := victim.WriteFiles(ctx, berth.File{Path: "kept", Data: []byte("kept\n")}); err != nil {
		t.Fatal(err)
	}
	if err := victim.Hibernate(ctx); err != nil {
		t.Fatal(err)
	}
	execOK(ctx, t, victim, "true") // wakes it from the checkpoint
	st, err := victim.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkpoint := st.Checkpoint
	if checkpoint == "" {
		t.Fatal("no checkpoint after a hibernation")
	}
	if !inStore(t, filepath.Join(c.dir, "s3", "data", "berth"), checkpoint) {
		t.Errorf("checkpoint %s is not in the S3 bucket", checkpoint)
	}
	if err := victim.WriteFiles(ctx, berth.File{Path: "since", Data: []byte("after the checkpoint\n")}); err != nil {
		t.Fatal(err)
	}
	lostHost := hostOf(ctx, t, tc, victim.ID())
	// A sandbox on another host, to answer after the loss.
	var survivor *berth.Sandbox
	for h, ss := range hosts {
		if h != lostHost && len(ss) > 0 && ss[0] != victim {
			survivor = ss[0]
		}
	}
	if survivor == nil {
		t.Fatalf("no sandbox on a host other than %s: %v", lostHost, placement(hosts))
	}
	argv, opts := sh("echo ran >> ran; sleep 600")
	inflight, err := victim.Start(ctx, argv, opts)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the command to run", 30*time.Second, func() bool {
		b, err := victim.ReadFile(ctx, "ran")
		return err == nil && string(b) == "ran\n"
	})

	hostN := strings.TrimPrefix(lostHost, "berth@h")
	if err := c.run(t, "kill-host", hostN); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	res, err := inflight.Wait(ctx)
	noticed := time.Since(killed)
	t.Logf("host %s lost: the command in flight failed %v after the kill: %v", lostHost, noticed.Round(time.Millisecond), err)
	if berth.KindOf(err) != berth.SandboxLost {
		t.Fatalf("the command in flight on the lost host: %v (result %+v); want %s", err, res, berth.SandboxLost)
	}
	if bound := heartbeat + hostTimeout + 30*time.Second; noticed > bound {
		t.Errorf("the loss was noticed after %v; want within %v (heartbeat, host timeout, recovery)", noticed, bound)
	}
	if msg := err.Error(); !strings.Contains(msg, "write since") || !strings.Contains(msg, checkpoint) {
		t.Errorf("the loss reads %q; want it to name the file written since checkpoint %s, and the checkpoint", msg, checkpoint)
	}
	// The command's retry, bound to the lost host's queue, was never
	// started by any worker: it timed out waiting to be.
	if msg := err.Error(); !strings.Contains(msg, "ScheduleToStart") {
		t.Errorf("the loss reads %q; want the command's retry to have timed out before it started", msg)
	}

	// Re-created on another host, from the checkpoint: the file
	// written before it is there, the one after it and the command's
	// mark are not, and nothing runs the command again.
	if got := execOK(ctx, t, victim, "cat kept; ls"); got != "kept\nkept\nwho\n" {
		t.Errorf("the recovered workspace: %q; want kept and who alone", got)
	}
	if h := hostOf(ctx, t, tc, victim.ID()); h == lostHost || h == "" {
		t.Errorf("the recovered sandbox is on %q; want another host than %s", h, lostHost)
	}
	st, err = victim.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Running) != 0 {
		t.Errorf("commands under way after the recovery: %v; want none (the lost command never runs again)", st.Running)
	}
	if _, err := victim.ReadFile(ctx, "ran"); berth.KindOf(err) != berth.FileNotFound {
		t.Errorf("ran in the recovered workspace: %v; want FileNotFound (the command ran again?)", err)
	}

	// The others answer: a sandbox on a host that stayed.
	if got := execOK(ctx, t, survivor, "cat who"); got != survivor.ID() {
		t.Errorf("%s after the loss: %q", survivor.ID(), got)
	}
}

// inStore says whether an object of versitygw's bucket directory names
// the snapshot id.
func inStore(t *testing.T, bucket, id string) bool {
	found := false
	err := filepath.WalkDir(bucket, func(path string, _ os.DirEntry, err error) error {
		if err == nil && strings.Contains(path, id) {
			found = true
			return filepath.SkipAll
		}
		return err
	})
	if err != nil {
		t.Errorf("read the bucket: %v", err)
	}
	return found
}

func placement(hosts map[string][]*berth.Sandbox) map[string][]string {
	m := map[string][]string{}
	for h, ss := range hosts {
		for _, s := range ss {
			m[h] = append(m[h], s.ID())
		}
	}
	return m
}

// bucket opens the bucket the cluster's workers share, with the store's
// keys given to the client rather than through the process's environment,
// which the parallel tests' clusters would share.
func (c *cluster) bucket(ctx context.Context, t *testing.T) *blob.Bucket {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(c.dir, "s3", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	gw := c.address[:strings.LastIndex(c.address, ":")] // the bridge's address, the store's too
	endpoint := fmt.Sprintf("http://%s:%s", gw, c.setting("CLUSTER_S3_PORT"))
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(read("access"), read("secret"), ""),
	})
	b, err := s3blob.OpenBucket(ctx, client, "berth", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// dial is a Temporal client and a berth client on the cluster's server,
// closed when the test ends.
func (c *cluster) dial(ctx context.Context, t *testing.T) (client.Client, *berth.Client) {
	t.Helper()
	tc, err := client.DialContext(ctx, client.Options{
		HostPort: c.address, Namespace: "default",
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return tc, berth.New(tc, berth.WithRetryFor(2*time.Minute))
}
