package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/idlock"
	"github.com/berth-dev/berth/provider/internal/records"
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
	records.Base
	Image     string `json:"image"`
	Container string `json:"container"` // Docker's id
	UID       int    `json:"uid"`       // also the slot's name
	// Freezer is the container's cgroup file that says whether it is
	// frozen: freezer.state (cgroup v1) or cgroup.freeze (v2). It is
	// gone once the container is.
	Freezer string `json:"freezer"`
}

func (r *record) info() provider.Info { return r.Info(Name) }

func (p *Provider) recordPath(id string) string {
	return filepath.Join(p.cfg.StateDir, sandboxesDir, id+".json")
}

// pausedPath is the marker present while a sandbox is paused.
func (p *Provider) pausedPath(id string) string {
	return filepath.Join(p.cfg.StateDir, sandboxesDir, id+".paused")
}

func (p *Provider) slotPath(uid int) string {
	return filepath.Join(p.cfg.StateDir, slotsDir, strconv.Itoa(uid))
}

func (p *Provider) readRecord(id string) (*record, error) {
	var rec record
	if err := records.Read(p.recordPath(id), id, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// writeRecord publishes a record whole: a reader sees it all or none.
func (p *Provider) writeRecord(rec *record) error {
	return records.Write(p.recordPath(rec.ID), rec)
}

// lock takes the lock of one sandbox id, waiting for it; unlock releases
// it.
func (p *Provider) lock(id string) (unlock func(), err error) {
	return idlock.Lock(filepath.Join(p.cfg.StateDir, lockFile), id)
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
