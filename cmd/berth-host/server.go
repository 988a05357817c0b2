package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/devserver"
)

// postgresPasswordEnv holds the database password: a flag's value would
// show in ps to every user of the machine.
const postgresPasswordEnv = "BERTH_POSTGRES_PASSWORD"

func newServer() *cobra.Command {
	var (
		address, namespace, dataDir string
		pg                          devserver.Postgres
		pgAttrs                     []string
		uiPort                      int
		tls                         devserver.TLS
		verbose                     bool
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a Temporal server alone, on PostgreSQL or SQLite",
		Long: `berth server runs the Temporal server berth dev embeds, alone, with no
berth worker: the server a cluster of berth workers (berth worker, on
any number of hosts) shares. It is the same code as Temporal's own
server binary, at the version berth links.

With --postgres-address its state is in PostgreSQL: two databases
(--postgres-database, --postgres-visibility-database) whose schema
was applied by Temporal's SQL tool at this server's version (berth-host
temporal-sql-tool; docs/cluster.md says how). The password is read from $` + postgresPasswordEnv + `.
Without it, the state is a SQLite file in --data-dir, as for berth dev.

The frontend listens on --address, which may be any local IP; history,
matching and the internal worker stay on 127.0.0.1. --tls-cert and
--tls-key serve the frontend over TLS; --tls-client-ca asks clients for
a certificate it signed (mutual TLS).

SIGTERM or SIGINT stops it. A server killed and started again on the
same database carries on: clients wait for it (berth's --retry-for).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := newLogger(verbose)
			opts := devserver.Options{Address: address, Namespace: namespace, DataDir: dataDir, UIPort: uiPort, Logger: log}
			if pg.Address != "" {
				pg.Password = os.Getenv(postgresPasswordEnv)
				attrs, err := parseAttrs(pgAttrs)
				if err != nil {
					return usageError{err}
				}
				pg.ConnectAttributes = attrs
				opts.Postgres = &pg
			} else if dataDir == "" {
				return usageError{fmt.Errorf("give --postgres-address, or --data-dir for SQLite")}
			}
			if tls.CertFile != "" || tls.KeyFile != "" || tls.ClientCAFile != "" {
				opts.TLS = &tls
			}
			srv, err := devserver.Start(ctx, opts)
			if err != nil {
				return err
			}
			log.Info("berth server is ready", "address", srv.Address(), "namespace", srv.Namespace())
			<-ctx.Done()
			return srv.Stop()
		},
	}
	f := cmd.Flags()
	f.StringVar(&address, "address", "127.0.0.1:7233", "the frontend's IP:port, the address workers and clients dial")
	f.StringVar(&namespace, "namespace", "default", "the namespace to create if missing")
	f.StringVar(&dataDir, "data-dir", "", "SQLite: the directory of the database (with PostgreSQL: only a lock file, optional)")
	f.StringVar(&pg.Address, "postgres-address", "", "PostgreSQL's host:port; the password is $"+postgresPasswordEnv)
	f.StringVar(&pg.User, "postgres-user", "temporal", "PostgreSQL user")
	f.StringVar(&pg.Database, "postgres-database", devserver.DefaultPostgresDatabase, "the database of workflows")
	f.StringVar(&pg.VisibilityDatabase, "postgres-visibility-database", devserver.DefaultPostgresVisibilityDatabase, "the database of visibility records")
	f.StringArrayVar(&pgAttrs, "postgres-attr", nil, "a connection parameter, as KEY=VALUE (sslmode=verify-full); repeatable")
	f.IntVar(&uiPort, "ui-port", 0, "serve the Temporal Web UI on the frontend's IP at this port; 0 for none")
	f.StringVar(&tls.CertFile, "tls-cert", "", "the frontend's TLS certificate (PEM); with --tls-key and --tls-ca")
	f.StringVar(&tls.KeyFile, "tls-key", "", "its key")
	f.StringVar(&tls.RootCAFile, "tls-ca", "", "the CA that signed --tls-cert, which the server's own clients verify it with")
	f.StringVar(&tls.ClientCAFile, "tls-client-ca", "", "require client certificates this CA signed (mutual TLS); with --tls-client-cert and --tls-client-key")
	f.StringVar(&tls.ClientCertFile, "tls-client-cert", "", "under mutual TLS, the certificate the server's own clients present")
	f.StringVar(&tls.ClientKeyFile, "tls-client-key", "", "its key")
	f.BoolVarP(&verbose, "verbose", "v", false, "log more")
	return cmd
}

// parseAttrs reads KEY=VALUE pairs.
func parseAttrs(raw []string) (map[string]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	attrs := make(map[string]string, len(raw))
	for _, s := range raw {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--postgres-attr %q: want KEY=VALUE", s)
		}
		attrs[k] = v
	}
	return attrs, nil
}
