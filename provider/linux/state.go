package linux

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostproc"
	"github.com/berth-dev/berth/provider/internal/idlock"
	"github.com/berth-dev/berth/provider/internal/records"
)

// A sandbox's state directory holds:
//
//	sandbox.json   its record, written just before its daemon is claimed
//	sandboxd.sock  the daemon's socket
//	daemon.log     what the daemon printed
//	workspace.img  the workspace's file system (see makeWorkspace)
//
// Beside the sandboxes: .lock, whose byte-range locks serialise each
// sandbox's creation and destruction; .owners, whose byte-range locks
// each hold one user namespace owner uid (see allocOwner); .warm, the
// directories of warm daemons; .trash, destroyed sandboxes' directories being removed; and
// .newroot, where daemons build their roots.
const (
	recordFile    = "sandbox.json"
	pausedFile    = "paused" // present while the sandbox is paused
	socketFile    = "sandboxd.sock"
	logFile       = "daemon.log"
	newRootDir    = ".newroot" // beside the sandboxes: see Provider.newRoot
	warmDir       = ".warm"
	lockFile      = ".lock"
	trashDir      = ".trash"
	recordVersion = 1
)

func socketPath(stateDir, id string) string { return filepath.Join(stateDir, id, socketFile) }

// maxSocketPath is what a unix socket address can hold.
const maxSocketPath = 107

// shortSocketPath gives a name for a unix socket path that fits in a
// socket address: the path itself, or, when it is too long, the path
// through a descriptor of its directory (/proc/self/fd/N/name), which
// done must close after the bind or connect.
func shortSocketPath(path string) (name string, done func(), err error) {
	if len(path) <= maxSocketPath {
		return path, func() {}, nil
	}
	dir, err := os.OpenFile(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)), func() { dir.Close() }, nil
}

// record is what the host keeps about a sandbox.
type record struct {
	Version int `json:"version"`
	records.Base
	// PID and PIDStart identify the daemon on the host; the start time
	// tells it apart from a later process that reuses the pid.
	PID      int         `json:"pid"`
	PIDStart uint64      `json:"pid_start"`
	Cgroup   cgroupPaths `json:"cgroup"`
}

func (r *record) info() provider.Info { return r.Info(Name) }

// createRecord makes the empty record file of a directory that is not
// published yet, ahead of the claim that writes it (see writeRecord):
// making a file costs more than writing one.
func createRecord(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, recordFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_TRUNC, 0o600)
}

// writeRecord writes a record into f, the record file createRecord made
// in a directory that is not published yet, and closes f: renaming the
// directory publishes it, so no reader sees the file before it is whole.
func writeRecord(f *os.File, r *record) error {
	r.Version = recordVersion
	b, err := json.Marshal(r)
	if err == nil {
		_, err = f.Write(b)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readRecord reads the record of sandbox id, in directory dir.
func readRecord(dir, id string) (*record, error) {
	var r record
	if err := records.Read(filepath.Join(dir, recordFile), id, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// lock takes the lock of one sandbox id, across threads and processes;
// unlock releases it.
func lock(stateDir, id string) (unlock func(), err error) {
	return idlock.Lock(filepath.Join(stateDir, lockFile), id)
}

// alive reports whether the daemon recorded in r still runs.
func (r *record) alive() bool { return hostproc.Alive(r.PID, r.PIDStart) }

// exitsWithin reports whether the daemon recorded in r is gone, or goes
// within d.
func (r *record) exitsWithin(d time.Duration) bool {
	return hostproc.ExitsWithin(r.PID, r.PIDStart, d)
}
