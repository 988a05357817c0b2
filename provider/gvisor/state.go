package gvisor

import (
	"path/filepath"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostproc"
	"github.com/berth-dev/berth/provider/internal/idlock"
	"github.com/berth-dev/berth/provider/internal/records"
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
	Version int `json:"version"`
	records.Base
	Container string `json:"container"` // runsc's container id
	// PID and PIDStart identify runsc's sandbox process (the sentry) on
	// the host; the start time tells it apart from a later process that
	// reuses the pid.
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pid_start"`
}

func (r *record) info() provider.Info { return r.Info(Name) }

func (p *Provider) recordPath(id string) string {
	return filepath.Join(p.cfg.StateDir, id+recordSuffix)
}

func (p *Provider) containerDir(cid string) string {
	return filepath.Join(p.cfg.StateDir, containersDir, cid)
}

// writeRecord publishes a record whole: Get sees all of it or nothing.
func (p *Provider) writeRecord(r *record) error {
	r.Version = recordVersion
	return records.Write(p.recordPath(r.ID), r)
}

func (p *Provider) readRecord(id string) (*record, error) {
	var r record
	if err := records.Read(p.recordPath(id), id, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// lock takes the lock of one sandbox id, across threads and processes;
// unlock releases it.
func (p *Provider) lock(id string) (unlock func(), err error) {
	return idlock.Lock(filepath.Join(p.cfg.StateDir, lockFile), id)
}

// alive reports whether the sandbox process recorded in r still runs.
func (r *record) alive() bool { return hostproc.Alive(r.PID, r.PIDStart) }

// exitsWithin reports whether the sandbox process is gone, or goes
// within d.
func (r *record) exitsWithin(d time.Duration) bool {
	return hostproc.ExitsWithin(r.PID, r.PIDStart, d)
}
