package linux

import (
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
)

// confine applies no_new_privs, Landlock and seccomp to the daemon and,
// through inheritance, to every command it starts. It runs after the
// daemon has mounted everything it needs.
func confine() error {
	// Landlock: read and execute everywhere in the sandbox's root, write
	// only where the sandbox may. BestEffort applies what this kernel's
	// Landlock supports, and nothing when it has none.
	err := landlock.V5.BestEffort().RestrictPaths(
		landlock.RODirs("/"),
		// Refer: moving files between directories, which the daemon's
		// atomic writes and imports do.
		landlock.RWDirs("/workspace", "/tmp", "/dev", "/proc").WithRefer(),
		// Device ioctls on terminals alone, for commands on a terminal:
		// the daemon's own on the pty master, a shell's on its terminal.
		landlock.RWDirs("/dev/pts").WithIoctlDev().IgnoreIfMissing(),
		landlock.RWFiles("/dev/tty").WithIoctlDev().IgnoreIfMissing(),
	)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}

	filter, err := seccompFilter(auditArch, deniedSyscalls)
	if err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return loadSeccomp(filter)
}

// Confine applies to the calling process what confine applies to a
// linux sandbox's daemon. It is for the daemons of berth's other
// self-hosted providers (provider/docker), which run the same binary
// and must refuse commands the same kernel surface.
func Confine() error { return confine() }
