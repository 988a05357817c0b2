package main

import (
	"github.com/spf13/cobra"
	"go.temporal.io/server/tools/sql"

	// The tool finds its database plugins by name; postgres12 is the one
	// a cluster's schema is applied with (docs/cluster.md).
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
)

// newSQLTool links Temporal's own SQL schema tool (the code of its
// temporal-sql-tool binary, at the server version berth links, with the
// server's schema files built in) so that a cluster's database is set up
// by the same binary that serves it, and a machine needs no separate
// build of the tool.
func newSQLTool() *cobra.Command {
	return &cobra.Command{
		Use:   "temporal-sql-tool [flags] COMMAND",
		Short: "Temporal's SQL schema tool, at the version of the server berth links",
		Long: `berth-host temporal-sql-tool is Temporal's temporal-sql-tool
(go.temporal.io/server/tools/sql), linked in: it creates the databases
of a Temporal server on PostgreSQL and applies their schema, built in
and named by --schema-name (postgresql/v12/temporal,
postgresql/v12/visibility). Its flags are Temporal's; see its --help.
The password is read from $SQL_PASSWORD.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			// A failing step prints its error and exits 1 inside the tool;
			// what comes back is a mistake on its command line.
			if err := sql.RunTool(append([]string{cmd.CommandPath()}, args...)); err != nil {
				return usageError{err}
			}
			return nil
		},
	}
}
