package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/transfer"
)

func newRun(cf *connFlags) *cobra.Command {
	var (
		in         berth.RunOptions
		files, env []string
		memory     string
		maxOutput  string
		detach     bool
		stdin      bool
		network    networkFlags
		res        *resultFlags
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
interrupt stops waiting. A run started with --detach is canceled by
nothing of the sort: berth logs only follows it; berth run cancel ends it.

berth run ls and berth run cancel are subcommands: the command to run
always follows "--", and "berth run -- ls" runs ls.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			in.Argv = args
			var err error
			if in.Files, err = readFiles(files); err != nil {
				return usageError{err}
			}
			if in.Env, err = parseEnv(env); err != nil {
				return usageError{err}
			}
			if memory != "" {
				if in.Memory, err = parseBytes(memory); err != nil {
					return usageError{fmt.Errorf("--memory: %w", err)}
				}
			}
			if maxOutput != "" {
				if in.MaxOutput, err = parseBytes(maxOutput); err != nil {
					return usageError{fmt.Errorf("--max-output: %w", err)}
				}
			}
			if in.Network, err = network.policy(); err != nil {
				return usageError{err}
			}
			if stdin {
				if in.Stdin, err = readStdin(os.Stdin); err != nil {
					return err
				}
			}
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			// Not abandoned on an interrupt: followOrCancel cancels it.
			run, err := c.Run(context.WithoutCancel(ctx), in)
			if err != nil {
				return fmt.Errorf("start the run: %w", err)
			}
			id := run.ID()
			if detach {
				return printID(os.Stdout, *res.format, id)
			}
			return followOrCancel(ctx, c, id, res.sink())
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.Provider, "provider", berth.DefaultProvider, "where the sandbox lives (berth providers lists them)")
	f.StringVar(&in.Image, "image", "", "the image its root filesystem comes from (default: the provider's)")
	f.StringArrayVar(&files, "file", nil, "DEST=SRC: copy local file SRC to workspace path DEST (repeatable; 2 MiB in all: use berth sandbox cp beyond)")
	f.StringArrayVar(&env, "env", nil, "K=V: set an environment variable (repeatable)")
	f.DurationVar(&in.Timeout, "timeout", 0, "end the command after this long (e.g. 30s; default "+defaultTimeout+")")
	f.Float64Var(&in.CPU, "cpu", 0, "CPU cores (default "+defaultCPU+")")
	f.StringVar(&memory, "memory", "", "memory limit (e.g. 512Mi; default "+defaultMemory+")")
	network.register(f)
	f.BoolVar(&detach, "detach", false, "print the run's workflow id and return at once")
	f.BoolVarP(&stdin, "interactive", "i", false, "send standard input to the command (at most 2 MiB)")
	f.StringVar(&maxOutput, "max-output", "", "store at most this much of each output stream, its start and its end (default 256Mi)")
	res = addResultFlags(f)
	cmd.AddCommand(newRunLs(cf), newRunCancel(cf))
	return cmd
}

// cancelWait bounds how long an interrupted berth run waits for its
// run to end once it has asked for its cancellation.
const cancelWait = 30 * time.Second

// followOrCancel follows a run to its end, like berth logs, except that
// an interrupt (ctx done) cancels the run: the workflow destroys its
// sandbox on the way out, and berth follows it until it is closed, at
// most cancelWait, printing what is left of the output.
func followOrCancel(ctx context.Context, c *berth.Client, id string, sink *sink) error {
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
		cancelErr = c.Temporal().CancelWorkflow(rctx, id, "")
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
	stdout, stderr := sink.writers()
	out, err := c.RunHandle(id).Follow(followCtx, stdout, stderr)
	stopFollowing()
	<-watching
	select {
	case <-interrupted:
	default:
		return sink.result(id, id, out, err)
	}
	var canceled *temporal.CanceledError
	switch {
	case err == nil:
		// It ended before the cancellation reached it: its own end.
		return sink.result(id, id, out, nil)
	case errors.As(err, &canceled):
		fmt.Fprintf(os.Stderr, "berth: run %s canceled; its sandbox is destroyed\n", id)
	case waited && cancelErr == nil:
		fmt.Fprintf(os.Stderr, "berth: run %s: cancellation requested, the run has not ended yet (berth logs %s)\n", id, id)
	case cancelErr != nil:
		fmt.Fprintf(os.Stderr, "berth: run %s: could not cancel it: %v\n", id, cancelErr)
	default:
		fmt.Fprintf(os.Stderr, "berth: run %s: %v\n", id, err)
	}
	return exitError{130}
}

func readFiles(specs []string) ([]berth.File, error) {
	var files []berth.File
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
		if total += len(data); total > transfer.MaxInlineFiles {
			return nil, fmt.Errorf("--file: more than %d bytes of files in all", transfer.MaxInlineFiles)
		}
		fi, _ := os.Stat(src)
		files = append(files, berth.File{Path: dest, Data: data, Mode: fi.Mode().Perm()})
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

// runResult turns what became of a command, and the error of following
// it, into berth's exit: the command's own (runExit) when its output
// arrived whole; exitBerth, with a line on stderr, when it did not.
func runResult(what string, out *berth.Result, err error) error {
	if errors.Is(err, berth.ErrIncomplete) {
		fmt.Fprintf(os.Stderr, "berth: %s: %v\n", what, err)
		return exitError{exitBerth}
	}
	if err != nil {
		return fmt.Errorf("%s: %s", what, oneLine(err))
	}
	return runExit(out)
}

// runExit turns a run's outcome into berth's exit: the command's own
// code, 128+n for a signal, and the shell's conventions when berth ended
// it (124 timeout, 127 not found), with one line saying so.
func runExit(out *berth.Result) error {
	if out == nil {
		out = &berth.Result{}
	}
	if out.Kind != "" {
		fmt.Fprintln(os.Stderr, "berth:", out.Message)
	}
	if code := exitCode(berth.RunExit{ExitCode: out.ExitCode, Signal: out.Signal, Kind: out.Kind}); code != 0 {
		return exitError{code}
	}
	return nil
}

// exitCode is the exit code berth gives a command that ended so.
func exitCode(e berth.RunExit) int {
	switch {
	case e.Kind == errdefs.Timeout:
		return 124
	case e.Kind == errdefs.CommandNotFound:
		return 127
	case e.Kind == errdefs.OutOfMemory:
		return 137
	case e.Kind != "":
		return exitBerth
	case e.Signal != "":
		return 128 + int(unix.SignalNum(e.Signal))
	}
	return e.ExitCode
}
