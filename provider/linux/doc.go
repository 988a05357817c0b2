// Package linux is berth's default provider: sandboxes made of Linux
// namespaces and cgroups on the local host, with nothing to install.
//
// A sandbox is the berth binary re-executed as the sandbox's first
// process, in new user, mount, PID, network, IPC, UTS and cgroup
// namespaces. It mounts a root of read-only binds of the host's /usr and
// /etc (or of a root filesystem directory, or of an image's, unpacked
// once into a cache shared by sandboxes: see package image and
// Config.ImageDir), a writable /workspace of
// bounded size and file count (a sparse ext4 image of its own, on a loop
// device: 10 GiB by default, see [Config]), a private /tmp, /proc and a
// minimal /dev; brings up a loopback interface
// and nothing else; locks itself down with no_new_privs, a seccomp filter
// and Landlock; and then serves [sandboxd] on a unix socket in the
// sandbox's state directory. Commands run as an unprivileged user with
// every capability dropped, under cgroup limits on memory, CPU and
// processes that are in force before the first command starts; their
// memory limit leaves the daemon a reserve (KernelLimits.MemoryReserve).
// Each sandbox's user namespace is owned by a host uid of its own, which
// is also its root's (its daemon's), so that the kernel's per-user
// counters of one sandbox are charged neither to the host's root nor to
// another sandbox, and no two sandboxes' daemons share a host uid.
//
// Sandboxes outlive the process that created them: any process on the
// host that opens the provider on the same state directory finds them by
// id and reconnects.
//
// # Re-execution
//
// Programs that create sandboxes must call [Main] first thing in main
// (and in TestMain), so that the re-executed binary becomes the daemon:
//
//	func main() {
//		linux.Main()
//		...
//	}
//
// # Requirements
//
// The provider runs as root. It uses cgroup v1 controllers where the
// host has them (hybrid hosts) and cgroup v2 otherwise. It needs loop
// devices (/dev/loop-control), ext4 and mke2fs (Debian: e2fsprogs).
package linux
