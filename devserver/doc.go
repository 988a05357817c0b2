// Package devserver runs a real Temporal server (go.temporal.io/server)
// inside the calling process: the layer under `berth dev`, and the server
// berth's own tests run against.
//
//	srv, err := devserver.Start(ctx, devserver.Options{DataDir: dir})
//	if err != nil {
//		return err
//	}
//	defer srv.Stop()
//	c, err := client.Dial(srv.ClientOptions())
//
// # Persistence
//
// State lives in one SQLite file in Options.DataDir, so workflows outlive
// the process: a server killed with SIGKILL and started again on the same
// directory carries on, and its timers and queued tasks fire. The schema is
// created once, atomically; the namespace is created on every start if
// missing. A lock file keeps a second server off a directory in use.
//
// The database runs in WAL mode with synchronous=NORMAL (sqliteConfig in
// config.go). A commit is then a write into the WAL file, with no fsync:
// the kernel holds it, so a process that crashes or is killed loses
// nothing it committed. What it gives up is the last commits before a
// power loss or a crash of the machine (the database itself stays
// intact: SQLite replays the WAL up to its last whole commit).
// synchronous=FULL would fsync at every commit, and every workflow task,
// activity and Update completion commits: on this project's VM an fsync
// takes milliseconds, more than all the rest of a commit. For a
// development server whose state is workflows that can be run again,
// that is the better side of the trade; a deployment that must survive
// power loss runs a real Temporal cluster.
//
// Options.Postgres keeps the state in two PostgreSQL databases instead
// (the server's postgres12 plugin), whose schema Temporal's own
// temporal-sql-tool applied beforehand: the server checks its version as
// it starts. The namespace is then registered through the frontend.
// berth-host server runs this alone, as the server of a cluster
// (docs/cluster.md).
//
// # Latency
//
// The server runs with dynamic config tuned for one host (see
// tunedDynamicConfig in config.go). The change that matters most lifts the
// history queue processors' poll rate limits: at the stock 20 polls a second
// every workflow task waits up to 50 ms in a queue, which made an activity
// round trip from a workflow cost 50 ms instead of about 5.
// What is left of a command sent through an Update (see
// hostworker's BenchmarkDurableExec) is the server's own work, in
// CPU: the Update crosses frontend and history, its workflow task goes
// through matching to the worker and back, and the task's completion is
// one SQLite transaction; on a loaded 2-core machine, each of these
// internal gRPC hops costs about half a millisecond.
// Options.DynamicConfig overrides any of it, key by key. Clients should
// dial with Server.ClientOptions, which turns off the SDK's gzip: on
// loopback it costs CPU for nothing.
//
// # Ports
//
// The frontend listens on Options.Address (port 0 picks one) for gRPC and
// on a free port of the same host for its HTTP API (Server.HTTPAddress).
// History, matching and the internal worker service each take a free port
// on 127.0.0.1. Free ports are reserved so that servers started in parallel
// do not collide, and a start that loses a port anyway is retried on new
// ones. Membership is static, so there are no gossip ports; metrics and
// pprof are off. Options.UIPort adds the Web UI.
//
// # Logs
//
// Options.Logger gets a few lines from berth and the Temporal server's own
// logs at Warn and above; the server's Info logs are dropped.
package devserver
