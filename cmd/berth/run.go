package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

func newRun() *cobra.Command {
	var (
		in                 workflows.RunInput
		files, env         []string
		memory             string
		address, namespace string
		dataDir            string
		detach             bool
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run one command in a fresh sandbox, durably, and print its output",
		Long: `berth run runs a one-shot job as a workflow on the Temporal server: files
in, one command, output out, the sandbox destroyed afterwards. It exits
with the command's exit code; when the command could not run to its end
(timeout, out of memory, not found) it says so in one line.

Interrupted (Ctrl-C, SIGTERM), berth run cancels the run: it waits for
the run to end and its sandbox to be destroyed, then exits 130. A second
interrupt stops waiting. A run started with --detach is cancelled by
nothing of the sort: berth logs only follows it.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			in.Argv = args
			var err error
			if in.Files, err = readFiles(files); err != nil {
				return err
			}
			if in.Env, err = parseEnv(env); err != nil {
				return err
			}
			if memory != "" {
				if in.Resources.Memory, err = parseBytes(memory); err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
			}
			c, err := dial(address, namespace)
			if err != nil {
				return err
			}
			defer c.Close()
			id := "run-" + randomHex(6)
			// Not abandoned on an interrupt: followOrCancel cancels it.
			wr, err := c.ExecuteWorkflow(context.WithoutCancel(ctx), client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue}, workflows.Run, in)
			if err != nil {
				return fmt.Errorf("start the run: %w", err)
			}
			if detach {
				fmt.Println(wr.GetID())
				return nil
			}
			return followOrCancel(ctx, c, wr, dataDir)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.Provider, "provider", linux.Name, "where the sandbox lives")
	f.StringArrayVar(&files, "file", nil, "DEST=SRC: copy local file SRC to workspace path DEST (repeatable)")
	f.StringArrayVar(&env, "env", nil, "K=V: set an environment variable (repeatable)")
	f.DurationVar(&in.Timeout, "timeout", 0, "end the command after this long (e.g. 30s)")
	f.Float64Var(&in.Resources.CPU, "cpu", 0, "CPU cores")
	f.StringVar(&memory, "memory", "", "memory limit (e.g. 512Mi, 2Gi)")
	f.BoolVar(&detach, "detach", false, "print the run's workflow id and return at once")
	f.StringVar(&address, "address", "", "Temporal frontend host:port (default $TEMPORAL_ADDRESS or 127.0.0.1:7233)")
	f.StringVar(&namespace, "namespace", "", "Temporal namespace (default $TEMPORAL_NAMESPACE or default)")
	f.StringVar(&dataDir, "data-dir", defaultDataDir(), "berth dev's data directory, to read outputs too large to travel inline")
	return cmd
}

// cancelWait bounds how long an interrupted berth run waits for its
// run to end once it has asked for its cancellation.
const cancelWait = 30 * time.Second

// followOrCancel follows a run to its end, like berth logs, except that
// an interrupt (ctx done) cancels the run: the workflow destroys its
// sandbox on the way out, and berth follows it until it is closed, at
// most cancelWait, printing what is left of the output.
func followOrCancel(ctx context.Context, c client.Client, wr client.WorkflowRun, dataDir string) error {
	id := wr.GetID()
	followCtx, stopFollowing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollowing()
	var (
		interrupted = make(chan struct{})
		cancelErr   error // set before interrupted is closed
		waited      bool  // set before stopFollowing when the wait ends unfinished
		watching    = make(chan struct{})
	)
	go func() {
		defer close(watching)
		select {
		case <-ctx.Done():
		case <-followCtx.Done():
			return
		}
		// Listen for a second interrupt before asking, not to miss it.
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		rctx, cancel := context.WithTimeout(followCtx, 10*time.Second)
		cancelErr = c.CancelWorkflow(rctx, id, wr.GetRunID())
		cancel()
		close(interrupted)
		wait := cancelWait
		if cancelErr != nil {
			wait = time.Second // it may have just ended; otherwise nothing to wait for
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-followCtx.Done():
			return // the run ended
		case <-timer.C:
		case <-again:
		}
		waited = true
		stopFollowing()
	}()
	out, err := follow(followCtx, c, wr, dataDir)
	stopFollowing()
	<-watching
	select {
	case <-interrupted:
	default:
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		return runExit(out)
	}
	var canceled *temporal.CanceledError
	switch {
	case err == nil:
		// It ended before the cancellation reached it: its own end.
		return runExit(out)
	case errors.As(err, &canceled):
		fmt.Fprintf(os.Stderr, "berth: run %s cancelled; its sandbox is destroyed\n", id)
	case waited && cancelErr == nil:
		fmt.Fprintf(os.Stderr, "berth: run %s: cancellation requested, the run has not ended yet (berth logs %s)\n", id, id)
	case cancelErr != nil:
		fmt.Fprintf(os.Stderr, "berth: run %s: could not cancel it: %v\n", id, cancelErr)
	default:
		fmt.Fprintf(os.Stderr, "berth: run %s: %v\n", id, err)
	}
	return exitError{130}
}

// dial connects to the Temporal server, saying plainly when it is not
// there.
func dial(address, namespace string) (client.Client, error) {
	if address == "" {
		address = os.Getenv("TEMPORAL_ADDRESS")
	}
	if address == "" {
		address = "127.0.0.1:7233"
	}
	if namespace == "" {
		namespace = os.Getenv("TEMPORAL_NAMESPACE")
	}
	quiet := hostworker.Logger(slog.New(slog.DiscardHandler))
	c, err := client.Dial(client.Options{HostPort: address, Namespace: namespace, Logger: quiet})
	if err != nil {
		return nil, fmt.Errorf("cannot reach the Temporal server at %s (is berth dev running?): %w", address, err)
	}
	return c, nil
}

func readFiles(specs []string) ([]provider.File, error) {
	var files []provider.File
	total := 0
	for _, s := range specs {
		dest, src, ok := strings.Cut(s, "=")
		if !ok || dest == "" || src == "" {
			return nil, fmt.Errorf("--file %q: want DEST=SRC", s)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", s, err)
		}
		if total += len(data); total > activities.MaxInlineFiles {
			return nil, fmt.Errorf("--file: more than %d bytes of files in all", activities.MaxInlineFiles)
		}
		fi, _ := os.Stat(src)
		files = append(files, provider.File{Path: dest, Data: data, Mode: fi.Mode().Perm()})
	}
	return files, nil
}

func parseEnv(kvs []string) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: want K=V", kv)
		}
		env[k] = v
	}
	return env, nil
}

// parseBytes reads sizes like 512Mi, 2Gi, 100M or 1048576.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

// follow prints a run's output as it is produced (see followOutput),
// and returns the run's result.
func follow(ctx context.Context, c client.Client, wr client.WorkflowRun, dataDir string) (workflows.RunOutput, error) {
	keys := func(ctx context.Context) (string, string, bool) {
		var st workflows.RunStatus
		v, err := c.QueryWorkflow(ctx, wr.GetID(), wr.GetRunID(), workflows.RunQuery)
		if err != nil || v.Get(&st) != nil || st.Stdout == "" {
			return "", "", false // not started yet
		}
		return st.Stdout, st.Stderr, true
	}
	return followOutput(ctx, dataDir, keys, func(ctx context.Context) (workflows.RunOutput, error) {
		var out workflows.RunOutput
		err := wr.Get(ctx, &out)
		return out, err
	})
}

// runExit turns a run's outcome into berth's exit: the command's own
// code, 128+n for a signal, and the shell's conventions when berth ended
// it (124 timeout, 127 not found), with one line saying so.
func runExit(out workflows.RunOutput) error {
	if out.Kind != "" {
		fmt.Fprintln(os.Stderr, "berth:", out.Message)
		switch out.Kind {
		case provider.KindTimeout:
			return exitError{124}
		case provider.KindCommandNotFound:
			return exitError{127}
		case provider.KindOutOfMemory:
			return exitError{137}
		}
		return exitError{125}
	}
	if out.Signal != "" {
		return exitError{128 + int(unix.SignalNum(out.Signal))}
	}
	if out.ExitCode != 0 {
		return exitError{out.ExitCode}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
