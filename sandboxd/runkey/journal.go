package runkey

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// The journal's bounds and defaults (see the package comment).
const (
	// DefaultDir is the journal's directory when neither --dir nor
	// $BERTH_RUN_DIR names one.
	DefaultDir = "/var/tmp/berth-run"
	// DirEnv names the environment variable read when --dir is not given.
	DirEnv = "BERTH_RUN_DIR"
	// DefaultCap is how many bytes of each of a command's streams are
	// kept, the daemon's own cap (sandboxd.OutputCap).
	DefaultCap = 256 << 10
	// Keep is how many finished entries pruning leaves.
	Keep = 256
	// MaxAge is the age beyond which an entry whose supervisor is gone is
	// pruned.
	MaxAge = 24 * time.Hour
	// ExitBerth is the exit code of berth's own errors.
	ExitBerth = 125
)

// The files of an entry.
const (
	fileLock    = "lock"
	fileArgv    = "argv"
	fileStarted = "started"
	fileStdout  = "stdout"
	fileStderr  = "stderr"
	fileStatus  = "status"
)

// Temporary names in the journal: an entry being built, one being removed.
const (
	prefixNew = ".new-"
	prefixOld = ".old-"
)

// status is a run's result, as the status file holds it. Exactly one of
// Exit, Signal, StartError and Error describes how it ended.
type status struct {
	Exit       *int     `json:"exit,omitempty"`
	Signal     int      `json:"signal,omitempty"`
	StartError string   `json:"start_error,omitempty"` // the command could not be started
	NotFound   bool     `json:"not_found,omitempty"`   // ... because it does not exist
	Error      string   `json:"error,omitempty"`       // berth's own failure
	TimedOut   bool     `json:"timed_out,omitempty"`
	Dropped    [2]int64 `json:"dropped,omitempty"` // stdout's, stderr's bytes beyond the cap
	Cap        int64    `json:"cap,omitempty"`
}

// writeAtomic writes data to dir/name through a temporary file renamed into
// place, so a reader sees all of it or nothing.
func writeAtomic(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, "."+name+"-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}

func writeStatus(entry string, st status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return writeAtomic(entry, fileStatus, b)
}

// readStatus returns the entry's status, or ok false when it has none yet.
func readStatus(entry string) (st status, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(entry, fileStatus))
	if errors.Is(err, os.ErrNotExist) {
		return status{}, false, nil
	}
	if err != nil {
		return status{}, false, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return status{}, false, fmt.Errorf("the journal's status %s: %w", filepath.Join(entry, fileStatus), err)
	}
	return st, true, nil
}

// held reports whether some process (the supervisor, or the first caller
// before it has started one) holds the entry's lock.
func held(entry string) (bool, error) {
	f, err := os.Open(filepath.Join(entry, fileLock))
	if err != nil {
		return false, err
	}
	defer f.Close() // releases a lock taken here
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// prune removes finished entries beyond the newest keep, and entries
// whose supervisor is gone older than maxAge, each first renamed out of the
// way so no caller sees one half removed. It is best effort: an entry it
// cannot read is left alone.
func prune(dir string, keep int, maxAge time.Duration, now time.Time) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type done struct {
		name string
		at   time.Time
	}
	var finished []done
	for _, de := range des {
		name := de.Name()
		if !de.IsDir() {
			continue
		}
		if strings.HasPrefix(name, prefixOld) {
			os.RemoveAll(filepath.Join(dir, name)) // a removal cut short
			continue
		}
		if strings.HasPrefix(name, prefixNew) {
			// A first call that died while building its entry, never
			// renamed into place, so never run.
			if fi, err := de.Info(); err == nil && now.Sub(fi.ModTime()) > time.Minute {
				os.RemoveAll(filepath.Join(dir, name))
			}
			continue
		}
		entry := filepath.Join(dir, name)
		if fi, err := os.Stat(filepath.Join(entry, fileStatus)); err == nil {
			finished = append(finished, done{name, fi.ModTime()})
			continue
		}
		fi, err := de.Info()
		if err != nil || now.Sub(fi.ModTime()) <= maxAge {
			continue
		}
		if h, err := held(entry); err == nil && !h {
			remove(dir, name)
		}
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].at.After(finished[j].at) })
	for i, d := range finished {
		if i >= keep || now.Sub(d.at) > maxAge {
			remove(dir, d.name)
		}
	}
}

func remove(dir, name string) {
	old := filepath.Join(dir, fmt.Sprintf("%s%d-%s", prefixOld, time.Now().UnixNano(), name))
	if os.Rename(filepath.Join(dir, name), old) == nil {
		os.RemoveAll(old)
	}
}
