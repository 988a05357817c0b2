package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/workflows"
)

// conn holds the flags every command that talks to the server shares.
type conn struct {
	address, namespace, dataDir string
}

func (c *conn) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.address, "address", "", "Temporal frontend host:port (default $TEMPORAL_ADDRESS or 127.0.0.1:7233)")
	f.StringVar(&c.namespace, "namespace", "", "Temporal namespace (default $TEMPORAL_NAMESPACE or default)")
	f.StringVar(&c.dataDir, "data-dir", defaultDataDir(), "berth dev's data directory, where outputs and snapshots are stored")
}

func (c *conn) dial() (client.Client, error) { return dial(c.address, c.namespace) }

func newSandbox() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create and drive long-lived sandboxes, each kept by its own workflow",
		Long: `A standalone sandbox lives in a workflow of its own until it is removed or
its lifetime ends. It pauses when idle and wakes on the next command. Its
operations are Workflow Updates, so other programs can drive it too (see
README).`,
	}
	cmd.AddCommand(newSandboxCreate(), newSandboxExec(), newSandboxCp(), newSandboxLs(), newSandboxRm(),
		newSandboxSnapshot(), newSandboxFork(),
		newSandboxSimple("pause", workflows.UpdatePause, "Freeze a sandbox now (the next command resumes it)"),
		newSandboxSimple("resume", workflows.UpdateResume, "Resume a paused or hibernated sandbox"),
		newSandboxSimple("hibernate", workflows.UpdateHibernate, "Checkpoint a sandbox and free everything it holds"))
	return cmd
}

func newSandboxCreate() *cobra.Command {
	var (
		in        workflows.SandboxInput
		cn        conn
		env       []string
		memory    string
		name      string
		noIdle    bool
		noHibern8 bool
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var err error
			if in.Env, err = parseEnv(env); err != nil {
				return err
			}
			if memory != "" {
				if in.Resources.Memory, err = parseBytes(memory); err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
			}
			if noIdle {
				in.IdleTimeout = sandbox.NoIdleTimeout
			}
			if noHibern8 {
				in.HibernateAfter = sandbox.NoIdleTimeout
			}
			if name == "" {
				name = "sbx-" + randomHex(6)
			}
			if err := provider.ValidateID(name); err != nil {
				return fmt.Errorf("--name: %w", err)
			}
			c, err := cn.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: name, TaskQueue: sandbox.DefaultQueue,
				WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
				WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
				// Else the SDK answers with the sandbox already there.
				WorkflowExecutionErrorWhenAlreadyStarted: true,
			}, workflows.Sandbox, in)
			var started *serviceerror.WorkflowExecutionAlreadyStarted
			if errors.As(err, &started) {
				// The same settings again are a no-op; others an error.
				err = workflows.CheckExisting(ctx, c, name, in)
			}
			if err != nil {
				return fmt.Errorf("create sandbox %s: %w", name, err)
			}
			// Wait until it exists, so that a failure to create it (an
			// unknown provider, a bad limit) is reported here.
			stop := showProgress(ctx, c, name)
			err = waitReady(ctx, c, name)
			stop()
			if err != nil {
				return err
			}
			fmt.Println(name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "the sandbox's id (default: a random sbx-...)")
	f.StringVar(&in.Provider, "provider", linux.Name, "where the sandbox lives")
	f.StringArrayVar(&env, "env", nil, "K=V: set an environment variable for every command (repeatable)")
	f.Float64Var(&in.Resources.CPU, "cpu", 0, "CPU cores")
	f.StringVar(&memory, "memory", "", "memory limit (e.g. 512Mi, 2Gi)")
	f.DurationVar(&in.IdleTimeout, "idle-timeout", 0, "pause after this long without a command (default 5m)")
	f.DurationVar(&in.HibernateAfter, "hibernate-after", 0, "checkpoint and free the sandbox after this long without a command (default 30m)")
	f.BoolVar(&noIdle, "no-idle-timeout", false, "never pause")
	f.BoolVar(&noHibern8, "no-hibernate", false, "never hibernate")
	f.DurationVar(&in.MaxLifetime, "lifetime", 0, "destroy the sandbox after this long whatever it does (default 24h)")
	f.StringVar(&in.FromSnapshot, "from-snapshot", "", "fill the workspace from this snapshot")
	cn.flags(cmd)
	return cmd
}

// waitReady waits until a sandbox's workflow has created its sandbox, or
// ended trying.
func waitReady(ctx context.Context, c client.Client, id string) error {
	for {
		st, err := status(ctx, c, id)
		if err == nil && st.ID != "" {
			return nil
		}
		desc, derr := c.DescribeWorkflowExecution(ctx, id, "")
		if derr == nil && desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			var ignored any
			werr := c.GetWorkflow(ctx, id, "").Get(ctx, &ignored)
			return fmt.Errorf("create sandbox %s: %w", id, cause(werr))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func status(ctx context.Context, c client.Client, id string) (workflows.SandboxStatus, error) {
	var st workflows.SandboxStatus
	v, err := c.QueryWorkflow(ctx, id, "", workflows.QuerySandbox)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}

// cause strips the layers of workflow and activity failure off an error,
// down to what went wrong.
func cause(err error) error {
	for {
		var app *temporal.ApplicationError
		if errors.As(err, &app) {
			return app
		}
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// update runs one update on a sandbox and waits for its result, showing
// the progress of the snapshots and restores it waits for.
func update(ctx context.Context, c client.Client, id, name string, out any, args ...any) error {
	defer showProgress(ctx, c, id)()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: args,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, out)
	}
	return updateErr(id, err)
}

// updateErr says plainly what went wrong with an update.
func updateErr(id string, err error) error {
	if err == nil {
		return nil
	}
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return fmt.Errorf("sandbox %s does not exist or is gone", id)
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return fmt.Errorf("sandbox %s: %s", id, app.Message())
	}
	return fmt.Errorf("sandbox %s: %w", id, err)
}

// showProgress reports on stderr, once a second after the first, how far
// the snapshots and restores of a sandbox's workflow have gone, until
// the function it returns is called.
func showProgress(ctx context.Context, c client.Client, id string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			desc, err := c.DescribeWorkflowExecution(ctx, id, "")
			if err != nil {
				continue
			}
			for _, a := range desc.GetPendingActivities() {
				kind := a.GetActivityType().GetName()
				if kind != "Snapshot" && kind != "Restore" || a.GetHeartbeatDetails() == nil {
					continue
				}
				var p snapshot.Progress
				if converter.GetDefaultDataConverter().FromPayloads(a.GetHeartbeatDetails(), &p) == nil {
					fmt.Fprintf(os.Stderr, "berth: %s of %s: %d files, %s\n", strings.ToLower(kind), id, p.Files, humanBytes(p.Bytes))
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

func newSandboxExec() *cobra.Command {
	var (
		req workflows.ExecRequest
		cn  conn
		env []string
	)
	cmd := &cobra.Command{
		Use:   "exec ID [flags] -- CMD [ARGS...]",
		Short: "Run a command in a sandbox, print its output live, and exit with its exit code",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := args[0]
			req.Argv = args[1:]
			var err error
			if req.Env, err = parseEnv(env); err != nil {
				return err
			}
			c, err := cn.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			updateID := "exec-" + randomHex(8)
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
				WorkflowID: id, UpdateID: updateID, UpdateName: workflows.UpdateExec, Args: []any{req},
				WaitForStage: client.WorkflowUpdateStageAccepted,
			})
			if err != nil {
				return updateErr(id, err)
			}
			keys := func(ctx context.Context) (string, string, bool) {
				st, err := status(ctx, c, id)
				if err != nil {
					return "", "", false
				}
				for _, r := range st.Running {
					if r.Update == updateID {
						return r.Stdout, r.Stderr, true
					}
				}
				return "", "", false
			}
			out, err := followOutput(ctx, cn.dataDir, keys, func(ctx context.Context) (workflows.RunOutput, error) {
				var out workflows.RunOutput
				err := h.Get(ctx, &out)
				return out, err
			})
			if err != nil {
				return updateErr(id, err)
			}
			return runExit(out)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&env, "env", nil, "K=V: set an environment variable (repeatable)")
	f.StringVar(&req.Dir, "dir", "", "working directory, a workspace path")
	f.DurationVar(&req.Timeout, "timeout", 0, "end the command after this long (default 10m)")
	cn.flags(cmd)
	return cmd
}

func newSandboxCp() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file or a directory into a sandbox (cp SRC ID:PATH), or out of it (cp ID:PATH DST, - for a file to stdout)",
		Long: `berth sandbox cp copies a local file or directory to PATH in the
sandbox's workspace, or to PATH/NAME when PATH ends with a slash; and a
file or directory of the workspace out, to DST, or into DST when DST is
a directory (as cp -r does). Small files travel in inline; directories,
large files and everything copied out go through the blob store that
berth dev shares with its worker (--data-dir).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			srcID, srcPath, srcIn := splitRemote(args[0])
			dstID, dstPath, dstIn := splitRemote(args[1])
			if srcIn == dstIn {
				return errors.New("cp: exactly one of SRC and DST must be ID:PATH")
			}
			c, err := cn.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			if dstIn {
				fi, err := os.Stat(args[0])
				if err != nil {
					return err
				}
				if strings.HasSuffix(dstPath, "/") || dstPath == "" || dstPath == "." {
					dstPath = path.Join(dstPath, fileBase(args[0]))
				}
				if fi.IsDir() || fi.Size() > activities.MaxInlineFiles {
					return copyIn(ctx, c, cn.dataDir, dstID, args[0], dstPath)
				}
				data, err := os.ReadFile(args[0])
				if err != nil {
					return err
				}
				files := []provider.File{{Path: dstPath, Data: data, Mode: fi.Mode().Perm()}}
				return update(ctx, c, dstID, workflows.UpdateWriteFiles, nil, workflows.WriteFilesRequest{Files: files})
			}
			if args[1] == "-" {
				var out activities.Output
				if err := update(ctx, c, srcID, workflows.UpdateReadFile, &out, workflows.PathRequest{Path: srcPath}); err != nil {
					return err
				}
				return printOutput(ctx, out, cn.dataDir)
			}
			return copyOut(ctx, c, cn.dataDir, srcID, srcPath, args[1])
		},
	}
	cn.flags(cmd)
	return cmd
}

// copyOut copies a file or directory of a sandbox out to dst: the
// sandbox's workflow exports it as a tar stream into the blob store, and
// berth unpacks it here and deletes it there.
func copyOut(ctx context.Context, c client.Client, dataDir, id, src, dst string) error {
	clean := path.Clean(src)
	root := src == "" || clean == "." || clean == provider.Workspace
	target := dst
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() && !root {
		target = filepath.Join(dst, path.Base(clean))
	}
	var out activities.Output
	if err := update(ctx, c, id, workflows.UpdateExport, &out, workflows.PathRequest{Path: src}); err != nil {
		return err
	}
	bucket, err := openBucket(ctx, blobURL(dataDir))
	if err != nil {
		return fmt.Errorf("cp: the copy is in the blob store, which is not reachable here: %w", err)
	}
	defer bucket.Close()
	defer func() {
		for i := range out.Parts {
			bucket.Delete(context.WithoutCancel(ctx), activities.PartKey(out.Blob, i))
		}
	}()
	rc, err := activities.Open(ctx, bucket, out)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer rc.Close()
	if err := extractTar(rc, target, root); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	return nil
}

// copyIn copies a local file or directory tree to dst in a sandbox: as a
// tar stream written to the blob store, which the sandbox's workflow then
// imports. Symbolic links are copied as links; other special files are
// left out.
func copyIn(ctx context.Context, c client.Client, dataDir, id, src, dst string) error {
	bucket, err := openBucket(ctx, blobURL(dataDir))
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer bucket.Close()
	key := activities.UploadPrefix + id + "-" + randomHex(8) + ".tar"
	w, err := bucket.NewWriter(ctx, key, nil)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	err = writeTar(w, src, dst)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	defer bucket.Delete(context.WithoutCancel(ctx), key)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	return update(ctx, c, id, workflows.UpdateImport, nil, workflows.ImportRequest{Blob: key})
}

// writeTar writes the tree at src as a tar stream whose names start with
// dst.
func writeTar(w io.Writer, src, dst string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			return tw.WriteHeader(hdr)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, fi.Size())
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// splitRemote splits ID:PATH; a local path has no colon before its first
// slash.
func splitRemote(s string) (id, p string, remote bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", s, false
	}
	return s[:i], s[i+1:], true
}

func fileBase(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// printOutput writes a file read from a sandbox to stdout, from the blob
// store when it is large.
func printOutput(ctx context.Context, o activities.Output, dataDir string) error {
	var r io.Reader = strings.NewReader(string(o.Inline))
	if o.Truncated {
		bucket, err := openBucket(ctx, blobURL(dataDir))
		if err != nil {
			return fmt.Errorf("cp: the file is large and its copy is in the blob store, which is not reachable here: %w", err)
		}
		defer bucket.Close()
		rc, err := activities.Open(ctx, bucket, o)
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		defer rc.Close()
		r = rc
	}
	_, err := io.Copy(os.Stdout, r)
	return err
}

func newSandboxLs() *cobra.Command {
	var (
		cn  conn
		all bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes with their provider, state and age",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := cn.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			query := "WorkflowType = 'Sandbox'"
			if !all {
				query += " AND ExecutionStatus = 'Running'"
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tPROVIDER\tSTATE\tAGE\tOWNER")
			var token []byte
			dc := converter.GetDefaultDataConverter()
			for {
				resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
				if err != nil {
					return fmt.Errorf("list sandboxes: %w", err)
				}
				for _, e := range resp.Executions {
					var prov, state string
					if p := e.GetMemo().GetFields()[workflows.MemoProvider]; p != nil {
						_ = dc.FromPayload(p, &prov)
					}
					if p := e.GetMemo().GetFields()[workflows.MemoState]; p != nil {
						_ = dc.FromPayload(p, &state)
					}
					if e.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
						state = strings.ToLower(e.Status.String())
					}
					age := time.Since(e.GetStartTime().AsTime()).Round(time.Second)
					// A standalone sandbox owns itself; a fork started by
					// another sandbox's workflow names it.
					owner := "-"
					if p := e.GetParentExecution().GetWorkflowId(); p != "" {
						owner = p
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Execution.GetWorkflowId(), prov, state, age, owner)
				}
				if token = resp.NextPageToken; len(token) == 0 {
					break
				}
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include ended sandboxes")
	cn.flags(cmd)
	return cmd
}

func newSandboxRm() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Destroy sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cn.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			var errs []error
			for _, id := range args {
				if err := update(ctx, c, id, workflows.UpdateStop, nil); err != nil {
					errs = append(errs, err)
					continue
				}
				// The workflow ends once the stop has; wait for it.
				if err := c.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
					errs = append(errs, fmt.Errorf("sandbox %s: %w", id, cause(err)))
				}
			}
			return errors.Join(errs...)
		},
	}
	cn.flags(cmd)
	return cmd
}

func newSandboxSnapshot() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a sandbox's workspace and print the snapshot's id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			var out workflows.SnapshotResponse
			if err := update(cmd.Context(), c, args[0], workflows.UpdateSnapshot, &out); err != nil {
				return err
			}
			fmt.Println(out.Snapshot)
			return nil
		},
	}
	cn.flags(cmd)
	return cmd
}

func newSandboxFork() *cobra.Command {
	var (
		cn       conn
		req      workflows.ForkRequest
		provider string
	)
	cmd := &cobra.Command{
		Use:   "fork ID",
		Short: "Make a new sandbox whose workspace is a copy of this one's, and print its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cn.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			if req.ID == "" {
				req.ID = "sbx-" + randomHex(6)
			}
			req.Provider = provider
			var out workflows.ForkResponse
			if err := update(ctx, c, args[0], workflows.UpdateFork, &out, req); err != nil {
				return err
			}
			if err := waitReady(ctx, c, out.ID); err != nil {
				return err
			}
			fmt.Println(out.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.ID, "name", "", "the new sandbox's id (default: a random sbx-...)")
	cmd.Flags().StringVar(&provider, "provider", "", "where the new sandbox lives (default: the same provider)")
	cn.flags(cmd)
	return cmd
}

// newSandboxSimple makes a command that runs one argument-less update.
func newSandboxSimple(use, name, short string) *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			return update(cmd.Context(), c, args[0], name, nil)
		},
	}
	cn.flags(cmd)
	return cmd
}
