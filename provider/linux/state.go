package linux

import (
	"encoding/json"
	"errors"
	"fmt"
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
//	workspace/     the workspace
//
// and a lock file beside it, <id>.lock, serialises its creation and
// destruction.
const (
	recordFile    = "sandbox.json"
	socketFile    = "sandboxd.sock"
	logFile       = "daemon.log"
	workspaceDir  = "workspace"
	newRootDir    = ".newroot" // beside the sandboxes: see Provider.newRoot
	warmDir       = ".warm"
	lockSuffix    = ".lock"
	recordVersion = 1
)

func socketPath(stateDir, id string) string { return filepath.Join(stateDir, id, socketFile) }

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

func writeRecord(dir string, r *record) error {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, recordFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, recordFile))
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

// lock takes the lock of one sandbox id; unlock releases it. Destroy
// removes the lock file while holding it, so after taking the lock it
// checks that the file is still the one at the path, and tries again if
// not.
func lock(stateDir, id string) (unlock func(), err error) {
	name := filepath.Join(stateDir, id+lockSuffix)
	for {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		held, err1 := f.Stat()
		cur, err2 := os.Stat(name)
		if err1 == nil && err2 == nil && os.SameFile(held, cur) {
			return func() { f.Close() }, nil
		}
		f.Close()
	}
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

func removeLock(stateDir, id string) error {
	err := os.Remove(filepath.Join(stateDir, id+lockSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
