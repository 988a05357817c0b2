// Package gvisor is berth's provider of sandboxes that are gVisor (runsc)
// containers on the local host: each sandbox's system calls are served
// by gVisor's user-space kernel, not the host's.
//
// Each sandbox is one runsc container, made from an OCI bundle the
// provider writes, whose first process is berth's own daemon (see
// [gvisorinit.Main]): it serves [sandboxd] on a unix socket in a directory the host
// binds in, made a socket of the host's by runsc's --host-uds=create, so
// gVisor sandboxes have what linux ones have: the exec journal
// (exactly-once), the file API, the bounds, the conformance suite.
//
// # Isolation
//
//   - root: read-only binds of the host's /usr and /etc (and the /bin,
//     /lib* and /sbin links of a merged-/usr host), with the sandbox's own
//     passwd, group, hosts and hostname over the host's; or of the
//     entries of a Spec.RootFS directory; the root itself read-only
//     (runsc's overlay is off);
//   - a writable /workspace, an ext4 image of its own on a loop device
//     (Resources.Disk, 10 GiB sparse by default), mounted on the host in
//     the container's directory and bound in; /tmp and /dev/shm tmpfs of a
//     quarter of the memory limit each, in the sandbox's memory;
//   - no network (--network=none): loopback only; unless, with
//     Config.Network, the spec asks for one: then the provider makes a
//     network namespace, attaches it (package netns: a veth into the
//     uplink, nftables rules there) and names it in the bundle before
//     runsc starts (--network=sandbox), for gVisor's network stack
//     takes the interfaces it finds as it boots, and never after; its
//     packets leave through the veth, where the rules hold them;
//   - memory: gVisor's kernel keeps all the sandbox's memory and has no
//     limit of its own, and the host's cgroup limit, reached, would kill
//     it and lose the sandbox; so the daemon enforces Resources.Memory
//     (less a reserve of its own, as in the linux provider), counting
//     gVisor's figure and the pipe and socket buffers the sentry keeps
//     outside it, and watching the host cgroup's own count, which the
//     provider passes in; it kills the command that holds the most when
//     commands go past the limit (reported as ErrOutOfMemory). The
//     host's cgroup limit is twice the sandbox's and 256 MiB, for
//     gVisor's own memory and the buffers its collector has yet to give
//     back. The daemon watches, so the limit is approximate;
//   - processes: the sandbox user's RLIMIT_NPROC, which gVisor enforces,
//     is Resources.Pids less a reserve of 32 for the daemon; the host's
//     cgroup allows twice that and 512 more, for the threads gVisor runs
//     them on; CPU is the host cgroup's quota;
//   - the daemon runs as root of the sandbox with SETUID, SETGID, KILL,
//     DAC_OVERRIDE, SYS_CHROOT, SYS_ADMIN and SYS_PTRACE (gVisor's, not
//     the host's: it remounts the writable places nodev, confines its
//     file operations, see below, and counts its commands' buffers) and
//     no_new_privs; commands run as uid 1000 with none.
//
// gVisor follows a final symbolic link that open is told not to follow
// when it is also told to open a directory, which os.Root relies on: so
// every operation of the daemon on the workspace's contents (reads,
// writes, listings, removals, exports, imports) runs as the sandbox user,
// without capabilities, in a root of its own, the workspace, and
// sandboxd checks each path's links itself to refuse those that leave
// it (see sandboxd's Files).
//
// # What needs root
//
// runsc's sandbox and gofer processes drop to an unprivileged user in
// user namespaces of their own, chrooted, under a seccomp filter: that
// is rootless. The provider itself runs as root, for two things: the
// workspace (a loop device and an ext4 mount) and the cgroups that
// bound memory, CPU and processes (runsc --rootless has no cgroups).
//
// # State
//
// The state directory holds each sandbox's record (labels, its container,
// its sandbox process's pid and start time), each container's directory
// and runsc's own state, so any process on the host that opens the
// provider on the same directory finds a sandbox by id, pauses, resumes
// or destroys it. A sandbox whose runsc sandbox process died is lost
// ([errdefs.ErrSandboxLost]). Destroy kills runsc's sandbox process, which
// runs everything in the sandbox, and removes the record; runsc's own
// cleanup, the workspace's mount and loop device and the files follow in
// the background (Close waits for them; a provider opened after a crash
// finishes them), leaving nothing behind.
//
// # Warm pool
//
// Once it has created a sandbox of the host's root with the default
// limits, the provider keeps Config.Pool such containers started, their
// daemons serving and unclaimed, so that the next creation is a claim
// over a socket instead of runsc's start.
//
// # Requirements
//
// runsc (gvisor.dev/gvisor/runsc, built with CGO_ENABLED=0), root, loop
// devices and mke2fs (Debian: e2fsprogs). The daemon binary must call
// [gvisorinit.Main]; it runs on the sandbox's root filesystem, so it should be
// static.
package gvisor
