package docker

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

// The state directory holds:
//
//	sandboxes/ID.json  each sandbox's record; it exists from the moment
//	                   the sandbox does until Destroy has removed all
//	                   the rest
//	slots/UID/         one directory per container, named after the
//	                   host uid its sandbox user takes, which the mkdir
//	                   that makes it reserves: run/ (the daemon's
//	                   sockets, root's alone), workspace.img, workspace/
//	                   (its mount point), passwd and group (the
//	                   container's, naming the sandbox user)
//	.lock              whose byte-range locks serialise each sandbox's
//	                   creation and destruction across processes
const (
	sandboxesDir = "sandboxes"
	slotsDir     = "slots"
	lockFile     = ".lock"
	runDir       = "run"
)

// record is what the host keeps about a sandbox. Docker's own labels
// are fixed when a container is made, before a warm container has a
// sandbox, so a sandbox's labels live here.
type record struct {
	ID        string             `json:"id"`
	Image     string             `json:"image"`
	Container string             `json:"container"` // Docker's id
	UID       int                `json:"uid"`       // also the slot's name
	Labels    map[string]string  `json:"labels,omitempty"`
	Resources provider.Resources `json:"resources"`
	CreatedAt time.Time          `json:"created_at"`
	ExpiresAt time.Time          `json:"expires_at"`
	// Freezer is the container's cgroup file that says whether it is
	// frozen: freezer.state (cgroup v1) or cgroup.freeze (v2). It is
	// gone once the container is.
	Freezer string `json:"freezer"`
}

func (r *record) info() provider.Info {
	return provider.Info{ID: r.ID, Provider: Name, Labels: r.Labels, CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt, Resources: r.Resources}
}

func (p *Provider) recordPath(id string) string {
	return filepath.Join(p.cfg.StateDir, sandboxesDir, id+".json")
}

func (p *Provider) slotPath(uid int) string {
	return filepath.Join(p.cfg.StateDir, slotsDir, strconv.Itoa(uid))
}

// maxRecord bounds what is read of a record: 64 labels of at most 384
// bytes and the rest fit many times over.
const maxRecord = 1 << 20

func (p *Provider) readRecord(id string) (*record, error) {
	f, err := os.Open(p.recordPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", provider.ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rec record
	if err := json.NewDecoder(&limitedFile{f, maxRecord}).Decode(&rec); err != nil {
		return nil, fmt.Errorf("record of sandbox %s: %w", id, err)
	}
	return &rec, nil
}

type limitedFile struct {
	f *os.File
	n int64
}

func (l *limitedFile) Read(b []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("record too large")
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.f.Read(b)
	l.n -= int64(n)
	return n, err
}

// writeRecord publishes a record whole: a reader sees it all or none.
func (p *Provider) writeRecord(rec *record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := p.recordPath(rec.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p.recordPath(rec.ID))
}

// lock takes the lock of one sandbox id, waiting for it; unlock releases
// it. Locks are open-file-description locks on one byte of .lock chosen
// by the id's hash: ids sharing a byte wait on each other, harmlessly.
func (p *Provider) lock(id string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(p.cfg.StateDir, lockFile), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(h.Sum32() % (1 << 20)), Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", id, err)
	}
	return func() { f.Close() }, nil // closing the description releases its locks
}

// freezerFile finds the file that says whether the cgroup of process
// pid is frozen, from /proc/PID/cgroup.
func freezerFile(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", err
	}
	var unified string
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "freezer" {
				return filepath.Join("/sys/fs/cgroup/freezer", parts[2], "freezer.state"), nil
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
		}
	}
	if unified == "" {
		return "", fmt.Errorf("process %d has no freezer cgroup", pid)
	}
	return filepath.Join("/sys/fs/cgroup", unified, "cgroup.freeze"), nil
}

// frozen reads a freezer file. A file that is gone means a container that
// is gone: fs.ErrNotExist.
func frozen(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	s := strings.TrimSpace(string(b))
	return s == "FROZEN" || s == "FREEZING" || s == "1", nil
}
