package devserver

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
)

const (
	defaultAddress   = "127.0.0.1:7233"
	defaultNamespace = "default"

	// dbFileName is the SQLite database inside Options.DataDir.
	dbFileName = "temporal.db"
	// lockFileName guards DataDir against a second server: two servers on
	// one database would fight over the history shard forever.
	lockFileName = "devserver.lock"

	clusterName = "active"
	// internalHost is where history, matching and the internal worker
	// listen. They are never meant to be reached from outside the machine,
	// whatever host the frontend is bound to.
	internalHost = "127.0.0.1"
)

// fastPollRPS lifts the history queue processors' poll rate limits. Each
// limiter admits one poll per 1/RPS seconds, so at the stock 20/s every task
// written to a queue (a workflow task to dispatch, an activity to schedule,
// a visibility record) waits up to 50 ms to be picked up; measured here, that
// fixed step was most of the cost of an activity round trip. Without it, the
// bound is CPU: the server and SDK work done per task.
const fastPollRPS = 100_000

// highRPS is for front-door request limits that only protect a shared
// production cluster from one noisy namespace; on a dev server they turn a
// burst of test traffic into ResourceExhausted errors.
const highRPS = 100_000

// tunedDynamicConfig returns berth's defaults for a single-host dev server,
// tuned for latency. Start checks every key against the server's registry,
// so a key renamed in a Temporal upgrade fails every start (and the tests)
// instead of being silently ignored.
//
// Several values repeat the v1.32 defaults (Update, eager start, eager
// activities): berth's design relies on them, so they are pinned rather than
// left to a default that may change.
func tunedDynamicConfig() map[string]any {
	return map[string]any{
		// History queue processors: see fastPollRPS.
		"history.transferProcessorMaxPollRPS":   fastPollRPS,
		"history.timerProcessorMaxPollRPS":      fastPollRPS,
		"history.visibilityProcessorMaxPollRPS": fastPollRPS,
		"history.outboundProcessorMaxPollRPS":   fastPollRPS,
		"history.archivalProcessorMaxPollRPS":   fastPollRPS,

		// Request rate limits per service and per namespace.
		"frontend.rps":                            highRPS,
		"frontend.namespaceRPS":                   highRPS,
		"frontend.namespaceRPS.visibility":        1_000, // stock 10/s throttles a UI or a CLI listing workflows
		"matching.rps":                            highRPS,
		"history.rps":                             highRPS,
		"frontend.persistenceMaxQPS":              highRPS,
		"history.persistenceMaxQPS":               highRPS,
		"matching.persistenceMaxQPS":              highRPS,
		"system.visibilityPersistenceMaxReadQPS":  highRPS,
		"system.visibilityPersistenceMaxWriteQPS": highRPS,

		// One partition per task queue. With the stock four, a task can land
		// in a partition no poller is waiting on and must be forwarded to the
		// root first; partitions only pay off with many matching hosts.
		"matching.numTaskqueueReadPartitions":  1,
		"matching.numTaskqueueWritePartitions": 1,

		// Features berth builds on.
		"frontend.enableUpdateWorkflowExecution":              true,
		"frontend.enableUpdateWorkflowExecutionAsyncAccepted": true,
		"system.enableEagerWorkflowStart":                     true,
		"system.enableActivityEagerExecution":                 true,

		// A dev tool does not phone home: the check calls Temporal's update
		// service in the background.
		"frontend.enableServerVersionCheck": false,

		// A dev server runs next to an IDE and a browser: the stock mutable
		// state cache (128k workflows) is sized for a production host.
		"history.hostLevelCacheMaxSize": 8_192,
	}
}

// staticDynamicConfig merges overrides over berth's defaults and rejects keys
// the server does not know, which it would otherwise ignore without a word.
func staticDynamicConfig(overrides map[string]any) (dynamicconfig.StaticClient, error) {
	merged := tunedDynamicConfig()
	for k, v := range overrides {
		merged[k] = v
	}
	if err := checkDynamicConfigKeys(merged); err != nil {
		return nil, err
	}
	dc := make(dynamicconfig.StaticClient, len(merged))
	for k, v := range merged {
		dc[dynamicconfig.MakeKey(k)] = v
	}
	return dc, nil
}

// checkDynamicConfigKeys reports keys missing from the server's registry.
// The registry is private; the YAML loader is the public way to query it,
// and loading an empty value list checks the key without touching values.
func checkDynamicConfigKeys(values map[string]any) error {
	var unknown []string
	for k := range values {
		var loader dynamicconfig.YamlLoader
		loader.LoadValue(dynamicconfig.MakeKey(k), []byte("[]"))
		if len(loader.Warnings) > 0 || len(loader.Errors) > 0 {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("devserver: unknown dynamic config keys %v (see go.temporal.io/server/common/dynamicconfig/constants.go)", unknown)
	}
	return nil
}

// sqliteConfig describes the database file. WAL with synchronous=NORMAL
// survives a killed process (committed transactions are in the WAL file the
// kernel already holds) and only risks the last commits on power loss, a
// good trade for a dev server: it makes each commit one write instead of
// several fsyncs. The server keeps one connection (the plugin's default),
// so its writers never meet SQLITE_BUSY; busy_timeout makes any other
// connection (a sqlite3 shell, say) wait instead of failing the server.
func sqliteConfig(path string) *config.SQL {
	return &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: path,
		ConnectAttributes: map[string]string{
			"mode":         "rwc",
			"journal_mode": "wal",
			"synchronous":  "normal",
			"busy_timeout": "10000",
		},
	}
}

// serverConfig is the static configuration of a one-shard, four-service
// server on SQLite or PostgreSQL, in the shape the temporal CLI's
// start-dev uses.
func serverConfig(p ports, db stores) *config.Config {
	var c config.Config
	c.Global.Membership.MaxJoinDuration = 30 * time.Second
	c.Global.Membership.BroadcastAddress = internalHost

	c.Persistence.DefaultStore = db.defaultStore
	c.Persistence.VisibilityStore = db.visibility
	// One shard: there is one history host, and every extra shard is one
	// more set of queue readers polling the same database. A database
	// keeps the count it was first started with: it cannot change.
	c.Persistence.NumHistoryShards = 1
	c.Persistence.DataStores = db.dataStores

	c.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             p.frontendAddress(),
				HTTPAddress:            p.httpAddress(),
			},
		},
	}
	c.DCRedirectionPolicy.Policy = "noop"

	service := func(bindIP string, port int) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: port, BindOnIP: bindIP}}
	}
	frontend := service(p.frontendHost, p.frontend)
	frontend.RPC.HTTPPort = p.http
	c.Services = map[string]config.Service{
		"frontend": frontend,
		"history":  service(internalHost, p.history),
		"matching": service(internalHost, p.matching),
		"worker":   service(internalHost, p.worker),
	}

	c.Archival.History.State = "disabled"
	c.Archival.Visibility.State = "disabled"
	c.NamespaceDefaults.Archival.History.State = "disabled"
	c.NamespaceDefaults.Archival.Visibility.State = "disabled"

	// The internal worker service reaches the frontend through this.
	c.PublicClient.HostPort = p.frontendAddress()
	return &c
}
