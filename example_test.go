package berth_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/snapshot"
)

// examples is the Temporal client of the server the examples run
// against: an embedded one, with one worker serving the linux provider,
// as berth dev runs them. Set once, by TestMain.
var examples client.Client

// dial returns a Temporal client for the examples. A program dials its
// own server (client.Dial), or Temporal Cloud.
func dial() client.Client { return examples }

func TestMain(m *testing.M) {
	linux.Main()
	os.Exit(runWithBerth(m))
}

// destroyAll destroys every sandbox p holds, and closes it.
func destroyAll(p *linux.Provider) {
	ctx := context.Background()
	infos, err := p.List(ctx, nil)
	if err != nil {
		log.Printf("list the examples' sandboxes: %v", err)
	}
	for _, info := range infos {
		if sb, err := p.Get(ctx, info.ID); err == nil {
			if err := sb.Destroy(ctx); err != nil {
				log.Printf("destroy %s: %v", info.ID, err)
			}
		}
	}
	p.Close()
}

// runWithBerth runs the tests and examples with a server and a worker
// in temporary directories, all gone afterwards.
func runWithBerth(m *testing.M) int {
	dir, err := os.MkdirTemp("", "berth-examples")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o711); err != nil {
		log.Fatal(err)
	}
	mkdir := func(name string) string {
		d := dir + "/" + name
		if err := os.Mkdir(d, 0o711); err != nil {
			log.Fatal(err)
		}
		return d
	}
	logger := slog.New(slog.DiscardHandler)
	srv, err := devserver.Start(context.Background(), devserver.Options{DataDir: mkdir("server"), Address: "127.0.0.1:0", Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	opts := srv.ClientOptions()
	opts.Logger = tlog.NewStructuredLogger(logger)
	c, err := client.Dial(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := linux.New(linux.Config{StateDir: mkdir("linux"), Pool: -1})
	if err != nil {
		log.Fatal(err)
	}
	// Sandboxes outlive their provider: what the examples left goes
	// before its directory does, or its daemons would run on.
	defer destroyAll(p)
	bucket := func(name string) *blob.Bucket {
		b, err := fileblob.OpenBucket(mkdir(name), nil)
		if err != nil {
			log.Fatal(err)
		}
		return b
	}
	outputs, snaps := bucket("outputs"), bucket("snapshots")
	defer outputs.Close()
	defer snaps.Close()
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": p},
		Outputs:   outputs, Snapshots: snapshot.New(snaps),
		Queue: berth.DefaultQueue, HostQueue: berth.DefaultQueue,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	examples = c
	return m.Run()
}

// Create a sandbox and run a command in it.
func ExampleSandboxes_Create() {
	ctx := context.Background()
	c := berth.New(dial())
	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{Provider: "linux", Env: map[string]string{"GREETING": "hello"}})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Stop(ctx)

	res, err := sb.Exec(ctx, []string{"sh", "-c", "echo $GREETING from $(pwd); exit 3"}, berth.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%sexit %d\n", res.Stdout, res.ExitCode)
	// Output:
	// hello from /workspace
	// exit 3
}

// Stream a command's output as it is produced.
func ExampleSandbox_Exec() {
	ctx := context.Background()
	c := berth.New(dial())
	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Stop(ctx)

	res, err := sb.Exec(ctx, []string{"sh", "-c", "read name; echo hi $name; echo oops >&2"}, berth.ExecOptions{
		Stdin:  []byte("berth\n"),
		Stdout: os.Stdout, Stderr: os.Stdout,
		Timeout: time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ok:", res.OK())
	// Unordered output:
	// hi berth
	// oops
	// ok: true
}

// Start a command without waiting for it, find it again by its id, and
// kill it.
func ExampleSandbox_Start() {
	ctx := context.Background()
	c := berth.New(dial())
	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Stop(ctx)

	cmd, err := sb.Start(ctx, []string{"sleep", "600"}, berth.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	// Another process, later, knows the command by its id.
	again, err := c.Sandboxes().Handle(sb.ID()).Attach(ctx, cmd.ID)
	if err != nil {
		log.Fatal(err)
	}
	if err := again.Kill(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := again.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ended by", res.Signal)
	// Output: ended by SIGKILL
}

// Write files into a workspace and read one back.
func ExampleSandbox_WriteFiles() {
	ctx := context.Background()
	c := berth.New(dial())
	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Stop(ctx)

	err = sb.WriteFiles(ctx,
		berth.File{Path: "src/main.py", Data: []byte("print(6 * 7)\n")},
		berth.File{Path: "run.sh", Data: []byte("#!/bin/sh\nwc -c < src/main.py > out.txt\n"), Mode: 0o755})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Exec(ctx, []string{"./run.sh"}, berth.ExecOptions{}); err != nil {
		log.Fatal(err)
	}
	out, err := sb.ReadFile(ctx, "out.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s", out)

	_, err = sb.ReadFile(ctx, "missing.txt")
	fmt.Println(berth.KindOf(err))
	// Output:
	// 13
	// FileNotFound
}

// Snapshot a workspace, start a new sandbox from it, and fork one.
func ExampleSandbox_Fork() {
	ctx := context.Background()
	c := berth.New(dial())
	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Stop(ctx)
	if err := sb.WriteFiles(ctx, berth.File{Path: "state", Data: []byte("v1")}); err != nil {
		log.Fatal(err)
	}

	snap, err := sb.Snapshot(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fromSnap, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{FromSnapshot: snap})
	if err != nil {
		log.Fatal(err)
	}
	defer fromSnap.Stop(ctx)

	fork, err := sb.Fork(ctx, berth.SandboxOptions{Env: map[string]string{"ROLE": "fork"}})
	if err != nil {
		log.Fatal(err)
	}
	defer fork.Stop(ctx)

	for _, s := range []*berth.Sandbox{fromSnap, fork} {
		b, err := s.ReadFile(ctx, "state")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(b))
	}
	// Output:
	// v1
	// v1
}

// Run one command in a fresh sandbox that is destroyed afterwards.
func ExampleClient_Run() {
	ctx := context.Background()
	c := berth.New(dial())
	run, err := c.Run(ctx, berth.RunOptions{
		Argv:  []string{"sh", "-c", "cat input.txt | tr a-z A-Z"},
		Files: []berth.File{{Path: "input.txt", Data: []byte("shout\n")}},
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := run.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%sexit %d\n", res.Stdout, res.ExitCode)
	// Output:
	// SHOUT
	// exit 0
}

// List the providers each host serves.
func ExampleClient_Providers() {
	ctx := context.Background()
	c := berth.New(dial())
	hosts, err := c.Providers(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range hosts {
		for _, p := range h.Providers {
			if p.Available {
				fmt.Println(p.Name, "pause:", p.Capabilities.Pause)
			}
		}
	}
	// Output: linux pause: true
}

// Tell failures apart by their kind, whatever Temporal wrapped them in.
func ExampleKindOf() {
	ctx := context.Background()
	c := berth.New(dial())
	_, err := c.Sandboxes().Get(ctx, "sbx-nonesuch")
	fmt.Println(berth.KindOf(err) == berth.NotFound)

	_, err = c.Sandboxes().Create(ctx, berth.SandboxOptions{Provider: "nonesuch"})
	fmt.Println(berth.KindOf(err), strings.Contains(err.Error(), "nonesuch"))
	// Output:
	// true
	// BadInput true
}
