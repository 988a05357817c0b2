package linux

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
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
	Version   int                `json:"version"`
	ID        string             `json:"id"`
	Labels    map[string]string  `json:"labels,omitempty"`
	Resources provider.Resources `json:"resources"`
	CreatedAt time.Time          `json:"created_at"`
	ExpiresAt time.Time          `json:"expires_at"`
	// PID and PIDStart identify the daemon on the host; the start time
	// tells it apart from a later process that reuses the pid.
	PID      int         `json:"pid"`
	PIDStart uint64      `json:"pid_start"`
	Cgroup   cgroupPaths `json:"cgroup"`
}

func (r *record) info() provider.Info {
	return provider.Info{ID: r.ID, Provider: Name, Labels: r.Labels, CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt, Resources: r.Resources}
}

// writeRecord writes a record into a directory that is not published
// yet: renaming the directory publishes it.
func writeRecord(dir string, r *record) error {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, recordFile), b, 0o600)
}

func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, recordFile), err)
	}
	return &r, nil
}

// lock takes the lock of one sandbox id, across threads and processes;
// unlock releases it. It is a byte-range lock, at a place chosen by the
// id, on one lock file beside the sandboxes: no file is made or removed
// per sandbox. Two ids may share a place; they then wait for each other,
// which is harmless.
func lock(stateDir, id string) (unlock func(), err error) {
	// Open file description locks belong to the open file, not the
	// process: each caller opens its own so callers exclude each other.
	f, err := os.OpenFile(filepath.Join(stateDir, lockFile), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(h.Sum32() % (1 << 20)), Len: 1}
	for {
		err = unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", id, err)
	}
	return func() { f.Close() }, nil
}

// processStart reads when a process started, in clock ticks since boot,
// or reports that it does not exist.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces and parentheses;
	// the fields after the last ')' are plain.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	fields := strings.Fields(s[i+1:])
	// starttime is field 22 of the line; fields[0] here is field 3.
	if len(fields) < 20 {
		return 0, errors.New("malformed stat")
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, fs.ErrNotExist // dead, not yet reaped
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive reports whether the daemon recorded in r still runs.
func (r *record) alive() bool {
	if r.PID <= 0 {
		return false
	}
	start, err := processStart(r.PID)
	return err == nil && start == r.PIDStart
}

// exitsWithin reports whether the daemon recorded in r is gone, or goes
// within d.
func (r *record) exitsWithin(d time.Duration) bool {
	if !r.alive() {
		return true
	}
	pidfd, err := unix.PidfdOpen(r.PID, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH)
	}
	defer unix.Close(pidfd)
	if !r.alive() { // the pid may have been reused before the open
		return true
	}
	n, _ := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, int(d.Milliseconds()))
	return n > 0
}
