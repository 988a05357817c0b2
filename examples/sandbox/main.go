// Command sandbox shows berth's first layer on its own: it makes a linux
// sandbox, puts a program in it, runs it with its output streamed, and
// destroys the sandbox. Run it as root:
//
//	go run ./examples/sandbox
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
)

const program = `import os, sys, time
print("hello from", os.uname().nodename, "as uid", os.getuid())
print("files:", sorted(os.listdir(".")))
sys.stdout.flush()
time.sleep(0.5)
print("no network:", [l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]])
`

func main() {
	linux.Main() // this binary is also the sandbox's daemon
	log.SetFlags(0)
	ctx := context.Background()

	p, err := linux.New(linux.Config{})
	if err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	sb, err := p.Create(ctx, provider.Spec{Resources: provider.Resources{Memory: 512 << 20, Pids: 256}})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)
	fmt.Printf("sandbox %s ready in %v\n", sb.ID(), time.Since(start).Round(time.Microsecond))

	if err := sb.WriteFiles(ctx, []provider.File{{Path: "hello.py", Data: []byte(program)}}); err != nil {
		log.Fatal(err)
	}
	res, err := sb.Exec(ctx, provider.ExecRequest{
		Argv:   []string{"/usr/bin/python3", "hello.py"},
		Stdout: os.Stdout,
		Stderr: os.Stderr,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit code %d after %v\n", res.ExitCode, res.Duration.Round(time.Millisecond))
}
