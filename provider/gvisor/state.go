package gvisor

import (
	"crypto/rand"
	"encoding/hex"
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

// The state directory holds:
//
//	.lock          byte-range locks serialising each sandbox's creation
//	               and destruction, across processes
//	.runsc/        runsc's own state (its --root)
//	.containers/   one directory per runsc container (see bundle.go),
//	               named by container id, warm ones included
//	<id>.json      each sandbox's record, naming its container
const (
	lockFile      = ".lock"
	runscDir      = ".runsc"
	containersDir = ".containers"
	recordSuffix  = ".json"
	recordVersion = 1
)

// record is what the host keeps about a sandbox.
type record struct {
	Version   int                `json:"version"`
	ID        string             `json:"id"`
	Container string             `json:"container"` // runsc's container id
	Labels    map[string]string  `json:"labels,omitempty"`
	Resources provider.Resources `json:"resources"`
	CreatedAt time.Time          `json:"created_at"`
	ExpiresAt time.Time          `json:"expires_at"`
	// PID and PIDStart identify runsc's sandbox process (the sentry) on
	// the host; the start time tells it apart from a later process that
	// reuses the pid.
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pid_start"`
}

func (r *record) info() provider.Info {
	return provider.Info{ID: r.ID, Provider: Name, Labels: r.Labels, CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt, Resources: r.Resources}
}

func (p *Provider) recordPath(id string) string {
	return filepath.Join(p.cfg.StateDir, id+recordSuffix)
}

func (p *Provider) containerDir(cid string) string {
	return filepath.Join(p.cfg.StateDir, containersDir, cid)
}

// writeRecord publishes a record whole: Get sees all of it or nothing.
func (p *Provider) writeRecord(r *record) error {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := p.recordPath(r.ID) + ".tmp-" + randomHex(4)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, p.recordPath(r.ID)); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (p *Provider) readRecord(id string) (*record, error) {
	b, err := os.ReadFile(p.recordPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", provider.ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read record of %s: %w", id, err)
	}
	return &r, nil
}

// lock takes the lock of one sandbox id, across threads and processes;
// unlock releases it. It is a byte-range lock at a place chosen by the
// id on one file, so no file is made or removed per sandbox; two ids may
// share a place and then wait for each other, which is harmless.
func (p *Provider) lock(id string) (unlock func(), err error) {
	// Open file description locks belong to the open file: each caller
	// opens its own, so callers in one process exclude each other too.
	f, err := os.OpenFile(filepath.Join(p.cfg.StateDir, lockFile), os.O_RDWR|unix.O_CLOEXEC, 0)
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
	// The command name, in parentheses, may hold anything; the fields
	// after the last ')' are plain.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, errors.New("malformed stat")
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, fs.ErrNotExist // dead, not yet reaped
	}
	return strconv.ParseUint(fields[19], 10, 64) // starttime, field 22
}

// alive reports whether the sandbox process recorded in r still runs.
func (r *record) alive() bool {
	if r.PID <= 0 {
		return false
	}
	start, err := processStart(r.PID)
	return err == nil && start == r.PIDStart
}

// exitsWithin reports whether the sandbox process is gone, or goes
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
