// Package remote runs berth's sandboxes on a hosted sandbox service (E2B,
// Daytona, ...). The service makes, finds and ends machines; berth-sandboxd,
// uploaded into each machine and reached through the service's port
// forward, serves every operation of [provider.Sandbox] there as it does
// on berth's own host. So exactly-once commands, streamed output read
// again from any offset, file transfer, the output cap, exports and the
// lease behave alike on every provider, and a service's package says
// only how a machine is made, found, listed, paused and ended: an [API].
//
// A machine's name derives from the sandbox id, so a Create retried
// after a lost answer finds the machine the first one made. Every
// machine carries berth's labels, so the reaper finds what no workflow
// owns by listing them. The daemon's bearer token derives from the
// provider's secret and the machine's name, so a worker that restarts
// reaches the daemons it had without storing anything.
package remote
