// Package cluster holds the test of berth on a cluster on one machine:
// examples/cluster.sh brings up PostgreSQL, the Temporal server on it
// as its own process, an S3 store (versitygw) and three workers in
// network namespaces of their own, and TestCluster drives them through
// the Go SDK, through the loss of a host and a restart of the server
// (docs/cluster.md); TestStoreOutage takes the S3 store away under
// checkpoints, and TestDiskFull fills a host's disk. It is a package of
// its own so that its long tests run beside the other packages' suites.
package cluster
