// Package docker is berth's provider of sandboxes that are containers of
// the local Docker engine, made from the caller's image.
//
// Each sandbox is one container of its image whose entrypoint is berth's
// own daemon, berth-sandboxd (a static binary, bind-mounted read-only),
// so an image with nothing of berth in it works; see [dockerinit]. The
// daemon serves [sandboxd] on a unix socket in a directory of the host's
// that only root can reach, and so gives Docker sandboxes what linux
// ones have: the exec journal (exactly-once), the file API, the bounds.
//
// # What of an image runs
//
// Nothing but berth's daemon: the image's ENTRYPOINT and CMD are
// replaced by it, its HEALTHCHECK is turned off (Docker would run it as
// the container's root, outside the daemon's confinement), and its USER
// and WORKDIR are not used (commands run as the sandbox user, in
// /workspace or Spec.Dir). Its ENV is the commands' base environment.
// Its VOLUMEs become bounded tmpfs (see below); one at or below a path
// berth mounts (/run/berth, /.berth, /dev/shm, /etc/passwd, /etc/group,
// /etc/resolv.conf, below /workspace) is refused as errdefs.ErrBadInput.
// The host reaches the daemon's sockets by descriptor (package
// hostsock): a link put at their names is refused, never followed.
//
// # Isolation
//
// The container runs with a read-only root; every capability dropped
// but the four the daemon needs (SETUID, SETGID, KILL, DAC_OVERRIDE);
// no_new_privs; Docker's default seccomp profile with the linux
// provider's filter and Landlock rules stacked on it by the daemon (no
// AF_VSOCK, AF_ALG, AF_PACKET..., no fanotify, no inotify watches for
// reads); its own cgroup, IPC, PID and UTS namespaces; no network but
// loopback unless the spec asks for one (see Network below).
// Commands run as an unprivileged user with no capabilities. The
// writable places are /workspace, /tmp and /dev/shm, nosuid and nodev.
// The daemon's operations on the workspace's contents run as that user
// too, without capabilities, confined by os.Root (Docker's seccomp
// profile refuses the unshare a chroot per operation needs; see
// sandboxd's Files).
//
// # Kernel counters per user
//
// Containers share the host's user ids, and the kernel counts
// processes, pending signals, inotify instances and watches and POSIX
// message queues per user, host-wide. So each sandbox's user is a host
// uid of its own, from a range nothing else uses (Config.UIDBase and
// UIDCount): what one sandbox takes counts against it alone. On top,
// RLIMIT_NOFILE, RLIMIT_SIGPENDING and RLIMIT_MSGQUEUE bound every
// process, and RLIMIT_NPROC the sandbox user's processes, below the
// container's pids limit, so that a fork bomb leaves the daemon room.
// inotify instances and watches are held to the host's per-user limits
// (fs.inotify.max_user_instances and max_user_watches), each sandbox to
// a share of its own, and their kernel memory is charged to the
// sandbox's memory cgroup; the seccomp filter refuses fanotify, and
// inotify watches for reads. The daemon, the host's root without
// CAP_SYS_RESOURCE, is exempt from RLIMIT_NPROC by the kernel, and the
// out-of-memory killer picks any command (oom_score_adj 1000) before it
// (0).
//
// # Workspace and limits
//
// The workspace is an ext4 image of its own on a loop device, as in
// the linux provider (Resources.Disk, 10 GiB sparse by default): Docker
// bounds a container's disk only on some storage drivers. Memory (no
// swap), CPU and pids are the container's cgroup limits; /tmp and
// /dev/shm are tmpfs of a quarter of the memory limit each, and so is
// each of the image's VOLUMEs, which would otherwise be Docker volumes
// on the host's disk. The kernel kills a command at the memory limit
// only when reclaim frees nothing, and reclaim can always free the
// image's files that commands run from, charged to the container: a
// command holding nearly the limit in socket buffers was left for
// minutes evicting and reading back its own program text. So the daemon
// watches the container's memory cgroup: past the limit less a reserve
// (16 MiB, or a quarter of smaller limits, as the linux provider's
// commands' limit), in memory reclaim cannot free, while the cgroup
// faults pages back in for a second, it kills the sandbox user's process
// with the highest oom_score, reported as out of memory.
//
// # State
//
// A sandbox's record, with its labels (Docker's labels are fixed when a
// container is made, before a warm container has a sandbox), lives in
// the provider's state directory, so any process on the host that opens
// the provider on the same directory finds it by id. Containers carry
// berth's labels (dev.berth.provider=docker and the state directory).
//
// # Network
//
// Every container is of Docker's network mode none. With
// Config.Network, a sandbox of NetworkAllow or NetworkOpen gets its
// network from package netns, as linux sandboxes do, once its container
// runs and before Create returns: a veth into the uplink moved into the
// namespace of the container's first process, and nftables rules in
// the uplink (NetworkOpen without private, metadata or host ranges);
// every container's /etc/resolv.conf is a bind naming the DNS stub.
// UpdateNetwork changes the rules, attaches or detaches while it runs.
// Without Config.Network, NetworkOpen is Docker's bridge, unpoliced, as
// before, and NetworkAllow is refused.
//
// # Warm pool
//
// Once it has created a sandbox of the default image with the default
// limits, the provider keeps Config.Pool containers of it started, their
// daemons serving and unclaimed, so that the next such creation is a
// claim over a socket instead of Docker's create and start.
//
// # Requirements
//
// The provider runs as root on the Docker engine's host, with loop
// devices and mke2fs (Debian: e2fsprogs).
package docker
