// Package daytona runs berth's sandboxes on Daytona (daytona.io), as a
// [remote.API] that package provider/remote builds the provider over.
//
// It drives Daytona through its official Go SDK
// (github.com/daytonaio/daytona/libs/sdk-go) and the API client the SDK
// is built on: a sandbox is created from a snapshot or an image, with
// berth's labels and a name that derives from the sandbox id (so a
// Create retried after a lost answer finds the sandbox it made);
// berth-sandboxd is uploaded through the toolbox's file API, started in
// a toolbox process session as a background command, and reached
// through the sandbox's preview URL for its port, with the preview
// token as a header. Every operation of a sandbox is then one request
// to the daemon; Daytona's own exec runs no command of berth's.
//
// What differs from a sandbox on berth's host:
//
//   - Daytona has no pause that keeps memory: berth's Pause is the
//     daemon's (every process stopped), and the sandbox runs on.
//   - CPU, memory and disk belong to the snapshot; a sandbox is sized
//     only when made from an image (Config.Image), in whole cores and
//     GiB, rounded up.
//   - Daytona's auto-stop looks at API activity, not at the processes
//     inside. It is off unless Config.AutoStop sets it; then every
//     renewal of the sandbox's lease counts as activity, so a sandbox
//     that berth holds is never stopped under it, and one a worker no
//     longer renews stops after the interval.
//   - A sandbox is made with the user root, so that the toolbox, and the
//     daemon it starts, act as root: the daemon owns the sandbox, as on
//     every provider, and runs commands as DefaultUser in /workspace.
package daytona
