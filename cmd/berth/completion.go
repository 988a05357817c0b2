package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/session"
)

// Shell completion (berth completion bash|zsh|fish, cobra's) completes
// sandbox and snapshot ids by asking the server the connection flags
// name, as the command would.

// completionTimeout bounds how long a shell waits for completions: a
// server that does not answer gives none rather than a hung prompt.
const completionTimeout = 3 * time.Second

// idLister lists ids, each with a tab and its description.
type idLister func(ctx context.Context, cf *connFlags) []string

// completeIDs completes arguments with what list gives: only the first
// one unless many.
func completeIDs(cf *connFlags, list idLister, many bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, completionTimeout)
		defer cancel()
		return list(ctx, cf), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeSandboxes completes the first argument with running sandboxes'
// ids.
func completeSandboxes(cf *connFlags) cobra.CompletionFunc { return completeIDs(cf, sandboxIDs, false) }

// completeSnapshots completes every argument with users' snapshot ids.
func completeSnapshots(cf *connFlags) cobra.CompletionFunc { return completeIDs(cf, snapshotIDs, true) }

func sandboxIDs(ctx context.Context, cf *connFlags) []string {
	c, err := cf.dial(ctx)
	if err != nil {
		return nil
	}
	defer c.Temporal().Close()
	rows, err := listSandboxes(ctx, c, false)
	if err != nil {
		return nil
	}
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID+"\t"+r.State)
	}
	return ids
}

func snapshotIDs(ctx context.Context, cf *connFlags) []string {
	c, err := cf.dial(ctx)
	if err != nil {
		return nil
	}
	defer c.Temporal().Close()
	rows, err := listSnapshots(ctx, c, false)
	if err != nil {
		return nil
	}
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID+"\tof "+r.Sandbox)
	}
	return ids
}

// completeCp completes cp's arguments: ID: for the sandbox side, and
// local files (a word already holding a colon is a path in a sandbox,
// which is not completed).
func completeCp(cf *connFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= 2 || strings.Contains(toComplete, ":") {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ids, _ := completeIDs(cf, sandboxIDs, true)(cmd, args, toComplete)
		for i, s := range ids {
			id, _, _ := strings.Cut(s, "\t")
			ids[i] = id + ":"
		}
		// A local path is as likely: the shell completes files too.
		return ids, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveDefault
	}
}

// completeSessions completes the first argument with the ids of the
// sessions of the manager *manager names (read when completing: the
// flag is parsed by then).
func completeSessions(cf *connFlags, manager *string) cobra.CompletionFunc {
	return completeIDs(cf, func(ctx context.Context, cf *connFlags) []string {
		c, err := cf.dial(ctx)
		if err != nil {
			return nil
		}
		defer c.Temporal().Close()
		infos, err := c.Sessions(*manager).Registry(ctx)
		if err != nil {
			return nil
		}
		ids := make([]string, 0, len(infos))
		for _, in := range infos {
			if in.Status != session.StatusEnded {
				ids = append(ids, in.ID+"\t"+in.Title)
			}
		}
		return ids
	}, false)
}
