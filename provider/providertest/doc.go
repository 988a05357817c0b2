// Package providertest is the conformance suite every berth provider runs
// from its own tests. A provider is done when it passes it.
//
// The suite checks the contract written on [provider.Provider] and
// [provider.Sandbox] from the outside, the way berth's upper layers use it:
// lifecycle and reconnection, command execution (streaming, exit codes,
// signals, timeouts, exactly-once by request id), files, workspace
// archives, confinement of every path to the workspace, pause and resume,
// and resource limits. Nothing in it knows how a provider is built.
//
// # Use
//
// A provider's test hands [Run] a [Harness] that says how to open it:
//
//	func TestConformance(t *testing.T) {
//		dir := t.TempDir()
//		providertest.Run(t, providertest.Harness{
//			Open: func(t *testing.T) provider.Provider {
//				p, err := provider.Open(t.Context(), "linux", provider.Config{"state-dir": dir})
//				if err != nil {
//					t.Fatal(err)
//				}
//				return p
//			},
//		})
//	}
//
// Open is called several times in one test; every provider it returns
// must see the same sandboxes, as a new process on the same host would.
// If a provider holds resources, Open should release them with t.Cleanup.
//
// # What the suite assumes
//
// Sandboxes have a Debian-like userland: /bin/sh, coreutils and
// /usr/bin/python3. Commands run as an unprivileged user, in
// [provider.Workspace] by default, with a clean environment.
//
// Tests that do not apply to a provider skip, saying which capability is
// missing. Light tests run in parallel (bounded by go test -parallel);
// the heavy ones (output and a file four times what a provider may hold
// of them, out of memory, a fork bomb) run one at a time with nothing
// else running. The whole suite
// can take several minutes: run it with a go test -timeout of 30m or more.
//
// # Safety
//
// The suite tries to escape the workspace on purpose. It only ever aims
// writes and removals at names it made up, and at a scratch directory of
// its own on the host, so a provider that fails an escape test does no
// damage to the machine running it.
package providertest
