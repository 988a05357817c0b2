// Package cluster holds the tests of berth on a cluster on one machine:
// examples/cluster.sh brings up PostgreSQL, the Temporal server on it
// as its own process, an S3 store (versitygw) and three workers in
// network namespaces of their own, and each test drives a cluster of its
// own through the Go SDK, all at once (docs/cluster.md). TestCluster
// loses a host and restarts the server under standalone sandboxes,
// TestClusterSurvival does so under a run and agent sessions,
// TestPartition cuts a host off and heals it, TestStoreOutage takes the
// S3 store away under checkpoints, and TestDiskFull fills a host's disk.
// It is a package of its own so that its long tests run beside the other
// packages' suites.
package cluster
