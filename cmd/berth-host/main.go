// Command berth-host runs berth on a worker host: `berth dev`, an
// embedded Temporal server and a worker in one process, and `berth
// worker`, a worker for a real cluster; and `berth-host server`, the
// Temporal server alone (on PostgreSQL or SQLite), for a cluster of
// workers to share. The berth command hands dev and worker to it. It is a binary of its own because it links the
// Temporal server, the providers and the blob stores' drivers: their
// initialisation would make each of berth's client commands start ten
// times slower. Install it beside berth:
//
//	go build -o bin/ ./cmd/berth ./cmd/berth-host ./cmd/berth-sandboxd
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	_ "gocloud.dev/blob/azureblob" // azblob:// URLs
	_ "gocloud.dev/blob/fileblob"  // file:// URLs
	_ "gocloud.dev/blob/gcsblob"   // gs:// URLs
	_ "gocloud.dev/blob/s3blob"    // s3:// URLs

	"github.com/berth-dev/berth/provider/linux"
)

func main() {
	// Where no berth-sandboxd is installed beside it, this binary is also
	// the linux provider's in-sandbox daemon; then this never returns.
	linux.Main()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal stops berth dev or berth worker gracefully;
		// a second ends the process at once, by the signal's default
		// action.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:]))
}

// usageError is a mistake on the command line.
type usageError struct{ error }

// run runs the command args name and says how to exit: 0, 2 for a
// mistake on the command line, 125 (berth's own failure) otherwise.
func run(ctx context.Context, args []string) int {
	root := &cobra.Command{
		// The berth command hands dev and worker to this binary: its
		// help must read as berth's.
		Use:           "berth",
		Short:         "Run berth on a worker host",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newDev(), newWorker(), newServer(), newSQLTool())
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	var usage usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "berth: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return 2
	}
	fmt.Fprintln(os.Stderr, "berth:", err)
	return 125
}

// newLogger makes berth's short, human logs.
func newLogger(verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // the terminal, or the journal, has the time
			}
			return a
		},
	}))
}
