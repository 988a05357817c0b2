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
//
// [New] builds the provider over an API. Create uploads the daemon
// (Config.DaemonPath) to Config.RemotePath in the machine, starts it as
// `berth-sandboxd serve --listen :PORT` with its configuration, token
// included, in its environment (never its argv; see package
// remoteinit), and waits for it to answer through the service's
// Endpoint. Every operation of a sandbox is then one HTTP request to the
// daemon, on connections kept alive. The daemon is its commands'
// subreaper, so a command's timeout, the lease and the lifetime reach
// every process a command left behind; at the lifetime it ends them, and
// the machine too when the service sets the machine no time limit of
// its own. Pause is the service's when the API is a [Pauser], else the
// daemon's. An API that is a [Snapshotter] makes the provider a
// [provider.Waker] and its sandboxes [provider.Hibernator]s: the
// service keeps a machine's filesystem, and a wake makes a machine from
// it and starts the daemon there as Create does. An API that is a [Checker] makes the provider a
// [provider.Checker]: berth providers then asks whether the service
// answers and takes the key.
//
// Limits (CPU, memory, disk) go to the service, which may refuse them;
// berth cannot tell that it enforces them, so Capabilities says it does
// not. Nor is the network berth's: a spec with a network policy other
// than the default is refused, and the default is what the service's
// machines have.
package remote
