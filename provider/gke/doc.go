// Package gke runs berth's sandboxes on a Kubernetes cluster running the
// agent-sandbox controller (sigs.k8s.io/agent-sandbox; GKE Agent Sandbox
// is one), as a [remote.API] that package provider/remote builds the
// provider over.
//
// It drives the cluster through the official typed clientsets of
// sigs.k8s.io/agent-sandbox v0.5.6 (clients/k8s) and its runtime client
// (clients/go/sandbox), over k8s.io/client-go v0.36.3: a sandbox is a
// SandboxClaim named for berth's machine name (so a Create retried after
// a lost answer finds the claim it made), naming the configured
// SandboxWarmPool (which names the SandboxTemplate), with berth's labels
// on the claim and, as annotations through additionalPodMetadata (the
// controller takes pod labels of its allowed domains only), on its
// Sandbox's pod template, and a shutdown time at the end of the sandbox's lifetime,
// which KeepAlive moves on. Create waits, polling with backoff, for the
// claim's Sandbox to be Ready. berth-sandboxd is uploaded through the
// runtime's /upload (and moved into place, mode 0755, by one /execute),
// or, with daemon-baked, found where the template's image holds it; it
// is started detached by the runtime's /execute, its environment in a
// file the runtime writes, never in an argv. The daemon's port is
// reached through the API server's port forward to the sandbox's pod
// (SPDY), or, for a berth inside the cluster, the sandbox's Service: the
// sandbox router removes Authorization, the daemon's bearer token, from
// what it forwards, so it serves the runtime only. Every operation of a
// sandbox is then one request to the daemon.
//
// What differs from a sandbox on berth's host:
//
//   - CPU, memory and disk are the template's: a spec that sizes a
//     sandbox is refused (ErrUnsupported); a template per size is the way.
//   - No pause that keeps memory: berth's Pause is the daemon's.
//   - A claim past its shutdown time is ended by the controller; one
//     whose Sandbox the controller left behind (users report it) is
//     still listed, by the controller's created-by label and berth's
//     annotations on its pod template, so berth's reaper deletes it.
//   - The runtime must run as root, so that the daemon it starts owns the
//     sandbox, as on every provider; the daemon runs commands as the
//     template's unprivileged user.
package gke
