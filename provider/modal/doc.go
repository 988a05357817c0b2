// Package modal runs berth's sandboxes on Modal (modal.com), as a
// [remote.API] that package provider/remote builds the provider over.
//
// It drives Modal through its official Go SDK,
// github.com/modal-labs/modal-client/go, pinned at v0.11.1: the SDK
// speaks Modal's gRPC API, which is not public and changes between
// releases, so the pin moves only with this package and its fake
// (package modalfake). A sandbox is made in berth's app (Config.App,
// made if missing) from a registry image (plus one layer that adds the
// sandbox user where the image lacks it), with the daemon's port as an
// encrypted tunnel, berth's labels as tags, and a name that derives
// from the sandbox id: names are unique within an app, so a Create
// retried after a lost answer finds the sandbox the first one made.
// berth-sandboxd is uploaded through an exec's standard input, started
// detached by another exec (its configuration in the exec's
// environment, never an argv), and reached through the tunnel's https
// URL. Every operation of a sandbox is then one request to the daemon;
// Modal's own exec runs no command of berth's.
//
// The SDK's calls of the V2 sandbox backend are used by name
// (ExperimentalCreate, ExperimentalFromName, ExperimentalList), whatever
// a profile's sandbox_v2 says, so that every sandbox berth makes is
// found by name and by tags.
//
// What differs from a sandbox on berth's host:
//
//   - A Modal sandbox's timeout is fixed when it is made: it is the
//     sandbox's lifetime, capped at MaxTimeout (24 h) (Machine.ExpiresAt);
//     KeepAlive has nothing to renew. The provider's MaxLifetime says so,
//     and the sandbox handle moves a berth sandbox that lives longer to
//     a new Modal sandbox, with its workspace, before the end. Modal's idle timeout is off unless Config.IdleTimeout sets
//     it: berth's lease governs idleness.
//   - Modal keeps no memory over a snapshot of berth's use: berth's
//     Pause is the daemon's (every process stopped), and the sandbox
//     runs on.
//   - Hibernation is Modal's suspend: the API is a remote.Snapshotter
//     whose Snapshot is Sandbox.SnapshotFilesystem with
//     Config.SnapshotTimeout and Config.SnapshotTTL always given (never
//     the SDK's 55 s and 30 days), the image's id and expiry recorded
//     in a tag of the sandbox under the hibernation's id, so that a
//     retry returns it; a wake makes the new sandbox from the image
//     (CreateRequest.Snapshot), and package remote starts the daemon in
//     it as at a create. The sandbox handle keeps its own checkpoint
//     besides, for when the image fails or expires.
//   - CPU and memory are Modal's requests (milli-CPU, MiB rounded up); a
//     disk size is not Modal's to set, and is refused.
//   - The SDK reads its server URL only from $MODAL_SERVER_URL or
//     ~/.modal.toml as a client is made: Config.ServerURL is set there
//     for that moment, under a lock of this package's.
//   - A tunnel's URL is always https: Config.TunnelCA trusts a CA of
//     one's own for it besides the system's (the fake's, in tests).
package modal
