package devserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	"go.temporal.io/server/common/resolver"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Postgres keeps the server's state in a PostgreSQL server instead of a
// SQLite file: a server process can then be killed, moved or started
// again anywhere that reaches the database, and carries on. The two
// databases must exist with their schema already applied by Temporal's
// own tool, temporal-sql-tool, at the version of go.temporal.io/server
// berth links (docs/cluster.md): the server checks the schema version as
// it starts and refuses one that does not match.
type Postgres struct {
	// Address is the PostgreSQL server's host:port. Required.
	Address string
	// User and Password authenticate to it. User is required.
	User, Password string
	// Database holds workflows, VisibilityDatabase the visibility
	// records listings read. Zero means "temporal" and
	// "temporal_visibility", the names Temporal's own docs use.
	Database, VisibilityDatabase string
	// ConnectAttributes are added to the connection string, as
	// PostgreSQL's parameters (sslmode=verify-full, ...). Zero means
	// sslmode=disable, which suits a database on loopback only.
	ConnectAttributes map[string]string
}

// Default database names (Postgres.Database, Postgres.VisibilityDatabase).
const (
	DefaultPostgresDatabase           = "temporal"
	DefaultPostgresVisibilityDatabase = "temporal_visibility"
)

// String names the database without its password.
func (p Postgres) String() string {
	return fmt.Sprintf("postgres://%s@%s/%s", p.User, p.Address, cmp.Or(p.Database, DefaultPostgresDatabase))
}

func (p *Postgres) check() error {
	if p.Address == "" || p.User == "" {
		return errors.New("devserver: Options.Postgres needs Address (host:port) and User")
	}
	if _, _, err := net.SplitHostPort(p.Address); err != nil {
		return fmt.Errorf("devserver: Options.Postgres.Address %q: want host:port: %w", p.Address, err)
	}
	return nil
}

// sql is the persistence config of one of the two databases.
func (p *Postgres) sql(database string) *config.SQL {
	return &config.SQL{
		PluginName:        postgresql.PluginName,
		ConnectAddr:       p.Address,
		ConnectProtocol:   "tcp",
		User:              p.User,
		Password:          p.Password,
		DatabaseName:      database,
		ConnectAttributes: maps.Clone(p.ConnectAttributes),
		// A frontend, a history and a matching service share them, each
		// with its own pool: PostgreSQL's stock max_connections is 100.
		MaxConns:        20,
		MaxIdleConns:    20,
		MaxConnLifetime: time.Hour,
	}
}

// Names of the data stores in the server's persistence config.
const (
	sqliteStore     = "sqlite"
	postgresStore   = "postgres"
	visibilityStore = "postgres-visibility"
)

// stores says where the server keeps its state: one SQLite file, or two
// PostgreSQL databases.
type stores struct {
	defaultStore, visibility string
	dataStores               map[string]config.DataStore
}

func sqliteStores(sql *config.SQL) stores {
	return stores{sqliteStore, sqliteStore, map[string]config.DataStore{sqliteStore: {SQL: sql}}}
}

func (p *Postgres) stores() stores {
	return stores{postgresStore, visibilityStore, map[string]config.DataStore{
		postgresStore:   {SQL: p.sql(cmp.Or(p.Database, DefaultPostgresDatabase))},
		visibilityStore: {SQL: p.sql(cmp.Or(p.VisibilityDatabase, DefaultPostgresVisibilityDatabase))},
	}}
}

// namespaceRetention is how long a namespace Start registers keeps
// closed workflows, as the SQLite path's namespace does.
const namespaceRetention = 24 * time.Hour

// registerNamespace registers the namespace through the frontend unless
// it exists. On SQLite the namespace is written into the database before
// the server starts; a database the server shares is only ever changed
// through the server.
func registerNamespace(ctx context.Context, c client.Client, namespace string) error {
	_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	var notFound *serviceerror.NamespaceNotFound
	if !errors.As(err, &notFound) {
		return err
	}
	_, err = c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        namespace,
		WorkflowExecutionRetentionPeriod: durationpb.New(namespaceRetention),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("devserver: register namespace %q: %w", namespace, err)
	}
	return nil
}

// checkSchema runs the server's own check of the databases' schema
// versions, which the server runs as it starts too: before the start,
// its failure is one line instead of the server's dependency graph.
func checkSchema(db stores) error {
	p := config.Persistence{DefaultStore: db.defaultStore, VisibilityStore: db.visibility, DataStores: db.dataStores, NumHistoryShards: 1}
	return sql.VerifyCompatibleVersion(p, resolver.NewNoopResolver(), log.NewNoopLogger())
}

// schemaHint says what to check when the server could not use the
// database: the server's own message says what it found, and when it
// could not connect, no more than that.
func schemaHint(err error) error {
	return fmt.Errorf("%w (is PostgreSQL reachable there, with both databases and Temporal's schema applied by temporal-sql-tool? docs/cluster.md)", err)
}
