package linuxinit

import (
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
)

// Confine applies no_new_privs, Landlock and seccomp to the calling
// process and, through inheritance, to every command it starts. A linux
// sandbox's daemon calls it after it has mounted everything it needs;
// the daemons of berth's other self-hosted providers (provider/docker)
// call it too, so that their commands are refused the same kernel
// surface.
func Confine() error {
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
