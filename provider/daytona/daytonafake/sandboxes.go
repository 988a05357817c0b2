package daytonafake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// What the fake answers for what a sandbox leaves to Daytona.
const (
	// DefaultSnapshot is a sandbox's snapshot when its request names no
	// snapshot nor image.
	DefaultSnapshot = "daytonaio/sandbox:latest"
	// UserName is the sandboxes' user, whom the toolbox acts as.
	UserName = "daytona"
	// Target is every sandbox's region.
	Target        = "us"
	daemonVersion = "0.170.0"

	// A sandbox's resources unless its request says otherwise: Daytona's
	// default class.
	defaultCPU, defaultMemory, defaultDisk = 1, 1, 3
	// The per-sandbox limits of Daytona's first tier.
	maxCPU, maxMemory, maxDisk = 4, 8, 10

	defaultAutoStop    = 15
	defaultAutoArchive = 7 * 24 * 60
	maxAutoArchive     = 30 * 24 * 60
	defaultAutoDelete  = -1
)

// Sandbox states, as the document names them.
const (
	stateCreating   = "creating"
	stateStarting   = "starting"
	stateRestoring  = "restoring"
	stateStarted    = "started"
	stateStopping   = "stopping"
	stateStopped    = "stopped"
	stateArchiving  = "archiving"
	stateArchived   = "archived"
	stateDestroying = "destroying"
	stateError      = "error"
)

// sandbox is one sandbox of the fake.
type sandbox struct {
	id           string
	orgID        string
	snapshot     string // empty for one built from an image
	dockerfile   string // its image's, for one built from an image
	user         string
	env          map[string]string
	public       bool
	blockAll     bool
	allowList    *string
	createdAt    time.Time
	previewToken string

	// Guarded by Server.mu.
	name                string
	labels              map[string]string
	cpu, gpu, mem, disk int
	state, desired      string
	errorReason         string
	autoStop            int
	autoArchive         int
	autoDelete          int
	updatedAt, activity time.Time
	stoppedAt           time.Time
	inflight            int // toolbox and preview requests under way
	gone                bool
	machine             *remotefake.Machine
	epoch               int // bumped at each change of state, so that a late transition knows it is stale
	sessions            map[string]*session

	connMu      sync.Mutex
	conns       map[*trackedConn]bool // the previews' connections into it
	connsClosed bool
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serveAPI serves the control API.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r, writeAPIError) {
		return
	}
	s.validated(w, r, s.apiRouter, "", writeAPIError, func(w http.ResponseWriter, r *http.Request, p map[string]string) {
		id := p["sandboxIdOrName"]
		if id == "" {
			id = p["sandboxId"]
		}
		rest := strings.TrimPrefix(r.URL.Path, "/api/sandbox")
		if id != "" {
			_, rest, _ = strings.Cut(strings.TrimPrefix(rest, "/"), "/")
			rest = "/" + rest
		}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/api/sandbox":
			s.create(w, r)
		case r.Method == http.MethodGet && r.URL.Path == "/api/sandbox":
			s.list(w, r, false)
		case r.Method == http.MethodGet && r.URL.Path == "/api/sandbox/paginated":
			s.list(w, r, true)
		case id == "":
			writeAPIError(w, r, http.StatusNotImplemented, "the fake does not serve this operation")
		case r.Method == http.MethodGet && rest == "/":
			s.withSandbox(w, r, id, func(sb *sandbox) { writeJSON(w, http.StatusOK, s.sandboxJSON(sb)) })
		case r.Method == http.MethodDelete && rest == "/":
			s.delete(w, r, id)
		case r.Method == http.MethodPost && rest == "/start":
			s.start(w, r, id)
		case r.Method == http.MethodPost && rest == "/stop":
			s.stop(w, r, id)
		case r.Method == http.MethodPost && rest == "/archive":
			s.archive(w, r, id)
		case r.Method == http.MethodPost && strings.HasPrefix(rest, "/autostop/"),
			r.Method == http.MethodPost && strings.HasPrefix(rest, "/autoarchive/"),
			r.Method == http.MethodPost && strings.HasPrefix(rest, "/autodelete/"):
			s.setInterval(w, r, id, strings.Split(rest, "/")[1], p["interval"])
		case r.Method == http.MethodPost && rest == "/last-activity":
			s.withSandbox(w, r, id, func(sb *sandbox) {
				sb.activity = time.Now()
				w.WriteHeader(http.StatusCreated)
			})
		case r.Method == http.MethodPut && rest == "/labels":
			s.replaceLabels(w, r, id)
		case r.Method == http.MethodPost && rest == "/network-settings":
			s.setNetwork(w, r, id)
		case r.Method == http.MethodGet && strings.HasPrefix(rest, "/ports/") && strings.HasSuffix(rest, "/preview-url"):
			s.previewURL(w, r, id, p["port"])
		case r.Method == http.MethodGet && rest == "/toolbox-proxy-url":
			s.withSandbox(w, r, id, func(*sandbox) {
				writeJSON(w, http.StatusOK, map[string]any{"url": s.ToolboxProxyURL()})
			})
		default:
			writeAPIError(w, r, http.StatusNotImplemented, "the fake does not serve this operation")
		}
	})
}

// find returns the sandbox of an id or a name, or nil. Callers hold s.mu.
func (s *Server) find(idOrName string) *sandbox {
	if sb := s.sandboxes[idOrName]; sb != nil {
		return sb
	}
	for _, sb := range s.sandboxes {
		if sb.name == idOrName {
			return sb
		}
	}
	return nil
}

// withSandbox runs f with s.mu held on the sandbox of idOrName, or
// answers 404.
func (s *Server) withSandbox(w http.ResponseWriter, r *http.Request, idOrName string, f func(*sandbox)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.find(idOrName)
	if sb == nil {
		notFound(w, r, idOrName)
		return
	}
	f(sb)
}

func notFound(w http.ResponseWriter, r *http.Request, idOrName string) {
	writeAPIError(w, r, http.StatusNotFound, "Sandbox with ID or name "+idOrName+" not found")
}

// sandboxJSON is the document's Sandbox. Callers hold s.mu.
func (s *Server) sandboxJSON(sb *sandbox) map[string]any {
	v := map[string]any{
		"id":                  sb.id,
		"organizationId":      sb.orgID,
		"name":                sb.name,
		"user":                sb.user,
		"env":                 sb.env,
		"labels":              sb.labels,
		"public":              sb.public,
		"networkBlockAll":     sb.blockAll,
		"target":              Target,
		"cpu":                 sb.cpu,
		"gpu":                 sb.gpu,
		"memory":              sb.mem,
		"disk":                sb.disk,
		"state":               sb.state,
		"desiredState":        sb.desired,
		"backupState":         "None",
		"autoStopInterval":    sb.autoStop,
		"autoArchiveInterval": sb.autoArchive,
		"autoDeleteInterval":  sb.autoDelete,
		"volumes":             []any{},
		"createdAt":           sb.createdAt.UTC().Format(time.RFC3339Nano),
		"updatedAt":           sb.updatedAt.UTC().Format(time.RFC3339Nano),
		"lastActivityAt":      sb.activity.UTC().Format(time.RFC3339Nano),
		"daemonVersion":       daemonVersion,
		"runnerId":            "runner-fake",
		"toolboxProxyUrl":     s.ToolboxProxyURL(),
	}
	if sb.snapshot != "" {
		v["snapshot"] = sb.snapshot
	}
	if sb.dockerfile != "" {
		at := sb.createdAt.UTC().Format(time.RFC3339Nano)
		v["buildInfo"] = map[string]any{"dockerfileContent": sb.dockerfile, "createdAt": at, "updatedAt": at,
			"snapshotRef": "daytona-" + sb.id[:8] + ":daytona"}
	}
	if sb.allowList != nil {
		v["networkAllowList"] = *sb.allowList
	}
	if sb.errorReason != "" {
		v["errorReason"] = sb.errorReason
		v["recoverable"] = false
	}
	return v
}

// setState moves sb to state, a new epoch. Callers hold s.mu.
func (sb *sandbox) setState(state, desired string) int {
	sb.state, sb.desired = state, desired
	sb.touch()
	sb.epoch++
	return sb.epoch
}

// touch marks an update of sb, which is activity: Daytona's repository
// sets lastActivityAt to updatedAt at each.
func (sb *sandbox) touch() {
	sb.updatedAt = time.Now()
	sb.activity = sb.updatedAt
}

// pending says whether sb is between states, which most operations
// refuse with 409 as Daytona does.
func (sb *sandbox) pending() bool {
	switch sb.state {
	case stateStarted, stateStopped, stateArchived, stateError:
		return false
	}
	return true
}

func stateChangeInProgress(w http.ResponseWriter, r *http.Request) {
	writeAPIError(w, r, http.StatusConflict, "Sandbox state change in progress")
}

type createRequest struct {
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	NetworkAllowList    *string           `json:"networkAllowList"`
	Class               string            `json:"class"`
	Target              string            `json:"target"`
	CPU                 *int              `json:"cpu"`
	GPU                 *int              `json:"gpu"`
	Memory              *int              `json:"memory"`
	Disk                *int              `json:"disk"`
	AutoStopInterval    *int              `json:"autoStopInterval"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval"`
	Volumes             []json.RawMessage `json:"volumes"`
	BuildInfo           *struct {
		DockerfileContent string   `json:"dockerfileContent"`
		ContextHashes     []string `json:"contextHashes"`
	} `json:"buildInfo"`
}

func orDefault(p *int, d int) int {
	if p == nil {
		return d
	}
	return *p
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := decode(r, &req); err != nil {
		writeAPIError(w, r, http.StatusBadRequest, "Invalid request body")
		return
	}
	bad := func(msg string) { writeAPIError(w, r, http.StatusBadRequest, msg) }
	switch {
	case req.AutoStopInterval != nil && *req.AutoStopInterval < 0:
		bad("Auto-stop interval must be non-negative")
		return
	case req.AutoArchiveInterval != nil && *req.AutoArchiveInterval < 0:
		bad("Auto-archive interval must be non-negative")
		return
	case len(req.Volumes) > 0:
		bad("the fake has no volumes")
		return
	case req.Target != "" && req.Target != Target:
		writeAPIError(w, r, http.StatusNotFound, "Region not found")
		return
	case req.BuildInfo != nil && req.Snapshot != "":
		bad("Cannot specify a snapshot and build info at the same time")
		return
	case req.Snapshot != "" && (req.CPU != nil || req.Memory != nil || req.Disk != nil || req.GPU != nil):
		bad("Cannot specify Sandbox resources when using a snapshot")
		return
	case req.Snapshot != "" && len(s.opts.Snapshots) > 0 && !slices.Contains(s.opts.Snapshots, req.Snapshot):
		bad("Snapshot " + req.Snapshot + " not found. Did you add it through the Daytona Dashboard?")
		return
	}
	cpu, mem, disk := orDefault(req.CPU, defaultCPU), orDefault(req.Memory, defaultMemory), orDefault(req.Disk, defaultDisk)
	switch {
	case cpu < 1 || mem < 1 || disk < 1:
		bad("CPU, memory and disk must be at least 1")
		return
	case orDefault(req.GPU, 0) > 0:
		bad("GPU request exceeds maximum allowed per sandbox (0).")
		return
	case cpu > maxCPU:
		bad(fmt.Sprintf("CPU request %d exceeds maximum allowed per sandbox (%d).", cpu, maxCPU))
		return
	case mem > maxMemory:
		bad(fmt.Sprintf("Memory request %dGB exceeds maximum allowed per sandbox (%dGB).", mem, maxMemory))
		return
	case disk > maxDisk:
		bad(fmt.Sprintf("Disk request %dGB exceeds maximum allowed per sandbox (%dGB).", disk, maxDisk))
		return
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			bad("invalid environment variable name: '" + k + "'")
			return
		}
	}
	now := time.Now()
	sb := &sandbox{
		id: newUUID(), orgID: s.orgID, snapshot: req.Snapshot, user: req.User,
		env: req.Env, labels: req.Labels, public: req.Public, blockAll: req.NetworkBlockAll,
		allowList: req.NetworkAllowList, createdAt: now, previewToken: randomToken(16),
		name: req.Name, cpu: cpu, mem: mem, disk: disk,
		autoStop:    orDefault(req.AutoStopInterval, defaultAutoStop),
		autoArchive: orDefault(req.AutoArchiveInterval, defaultAutoArchive),
		autoDelete:  orDefault(req.AutoDeleteInterval, defaultAutoDelete),
		updatedAt:   now, activity: now,
	}
	if sb.autoArchive == 0 {
		sb.autoArchive = maxAutoArchive
	}
	if req.BuildInfo != nil {
		sb.dockerfile = req.BuildInfo.DockerfileContent
	} else if sb.snapshot == "" {
		sb.snapshot = DefaultSnapshot
	}
	if sb.user == "" {
		sb.user = UserName
	}
	if sb.name == "" {
		sb.name = sb.id
	}
	if sb.env == nil {
		sb.env = map[string]string{}
	}
	if sb.labels == nil {
		sb.labels = map[string]string{}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		writeAPIError(w, r, http.StatusServiceUnavailable, "the fake is closing")
		return
	}
	if s.find(sb.name) != nil {
		s.mu.Unlock()
		writeAPIError(w, r, http.StatusConflict, "Sandbox with name "+sb.name+" already exists")
		return
	}
	if msg := s.overQuota(sb, true); msg != "" {
		s.mu.Unlock()
		bad(msg)
		return
	}
	epoch := sb.setState(stateCreating, stateStarted)
	s.sandboxes[sb.id] = sb
	v := s.sandboxJSON(sb)
	s.mu.Unlock()
	s.log.Info("daytonafake: sandbox created", "sandbox", sb.id, "name", sb.name)
	s.wg.Add(1)
	go s.makeMachine(sb, epoch)
	writeJSON(w, http.StatusOK, v)
}

// overQuota says which of the organization's totals sb would pass if it
// started (cpuMem) or only existed. Callers hold s.mu.
func (s *Server) overQuota(sb *sandbox, cpuMem bool) string {
	cpu, mem, disk := sb.cpu, sb.mem, sb.disk
	for _, o := range s.sandboxes {
		if o == sb {
			continue
		}
		if o.state != stateArchived {
			disk += o.disk
		}
		if o.state != stateStopped && o.state != stateArchived && o.state != stateError {
			cpu += o.cpu
			mem += o.mem
		}
	}
	q := s.opts.Quota
	switch {
	case cpuMem && cpu > q.CPU:
		return fmt.Sprintf("Total CPU limit exceeded. Maximum allowed: %d.\nTo increase concurrency limits, upgrade your organization's Tier by visiting the dashboard.", q.CPU)
	case cpuMem && mem > q.MemoryGiB:
		return fmt.Sprintf("Total memory limit exceeded. Maximum allowed: %dGiB.\nTo increase concurrency limits, upgrade your organization's Tier by visiting the dashboard.", q.MemoryGiB)
	case disk > q.DiskGiB:
		return fmt.Sprintf("Total disk limit exceeded. Maximum allowed: %dGiB.\nConsider archiving your unused Sandboxes to free up available storage.", q.DiskGiB)
	}
	return ""
}

// makeMachine makes sb's machine, then starts it.
func (s *Server) makeMachine(sb *sandbox, epoch int) {
	defer s.wg.Done()
	env := maps.Clone(sb.env)
	env["DAYTONA_SANDBOX_ID"] = sb.id
	env["DAYTONA_SANDBOX_SNAPSHOT"] = sb.snapshot
	env["DAYTONA_SANDBOX_USER"] = sb.user
	env["DAYTONA_ORGANIZATION_ID"] = sb.orgID
	m, err := s.opts.Farm.CreateWith(s.ctx, sb.id, remotefake.MachineOptions{Env: env, UserName: UserName})
	s.mu.Lock()
	if err != nil {
		s.log.Error("daytonafake: make a machine", "sandbox", sb.id, "err", err)
		if !sb.gone && sb.epoch == epoch {
			sb.setState(stateError, stateStarted)
			sb.errorReason = "Failed to create sandbox"
		}
		s.mu.Unlock()
		return
	}
	if sb.gone {
		s.mu.Unlock()
		m.Destroy(context.WithoutCancel(s.ctx))
		return
	}
	sb.machine = m
	s.mu.Unlock()
	if sb.user == "root" {
		// Daytona's images have root's home, where its toolbox starts;
		// the farm's image lacks it.
		if err := m.WriteFile(s.ctx, "/root/.profile", strings.NewReader(""), 0o644); err != nil {
			s.log.Error("daytonafake: make root's home", "sandbox", sb.id, "err", err)
		}
	}
	s.finishStart(sb, epoch)
}

// finishStart moves sb to started after StartDelay, unless something
// else moved it meanwhile.
func (s *Server) finishStart(sb *sandbox, epoch int) {
	if d := s.opts.StartDelay; d > 0 {
		select {
		case <-time.After(d):
		case <-s.ctx.Done():
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.gone || sb.epoch != epoch {
		return
	}
	sb.setState(stateStarted, stateStarted)
	sb.connMu.Lock()
	sb.connsClosed = false
	sb.connMu.Unlock()
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, paginated bool) {
	q := r.URL.Query()
	var labels map[string]string
	if l := q.Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &labels); err != nil {
			writeAPIError(w, r, http.StatusBadRequest, "Invalid labels format")
			return
		}
	}
	page, limit := 1, 100
	if paginated {
		var err error
		if v := q.Get("page"); v != "" {
			if page, err = strconv.Atoi(v); err != nil || page < 1 {
				writeAPIError(w, r, http.StatusBadRequest, "page must be a positive integer")
				return
			}
		}
		if v := q.Get("limit"); v != "" {
			if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 200 {
				writeAPIError(w, r, http.StatusBadRequest, "limit must be between 1 and 200")
				return
			}
		}
	}
	states := q["states"]
	idPart, namePart := q.Get("id"), q.Get("name")
	s.mu.Lock()
	var match []*sandbox
	for _, sb := range s.sandboxes {
		if sb.state == stateError && q.Get("includeErroredDeleted") != "true" {
			continue
		}
		if len(states) > 0 && !slices.Contains(states, sb.state) {
			continue
		}
		if !strings.Contains(sb.id, idPart) || !strings.Contains(sb.name, namePart) {
			continue
		}
		ok := true
		for k, v := range labels {
			if got, has := sb.labels[k]; !has || got != v {
				ok = false
			}
		}
		if ok {
			match = append(match, sb)
		}
	}
	// Newest first, as Daytona's default sort (createdAt, desc).
	sort.Slice(match, func(i, j int) bool {
		if !match[i].createdAt.Equal(match[j].createdAt) {
			return match[i].createdAt.After(match[j].createdAt)
		}
		return match[i].id < match[j].id
	})
	total := len(match)
	items := []map[string]any{}
	if !paginated {
		for _, sb := range match {
			items = append(items, s.sandboxJSON(sb))
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, items)
		return
	}
	for i := (page - 1) * limit; i < total && i < page*limit; i++ {
		items = append(items, s.sandboxJSON(match[i]))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"items": items, "total": total, "page": page,
		"totalPages": int(math.Ceil(float64(total) / float64(limit))),
	})
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, idOrName string) {
	s.mu.Lock()
	sb := s.find(idOrName)
	switch {
	case sb == nil:
		s.mu.Unlock()
		notFound(w, r, idOrName)
		return
	case sb.pending():
		s.mu.Unlock()
		stateChangeInProgress(w, r)
		return
	}
	sb.setState(stateDestroying, "destroyed")
	v := s.sandboxJSON(sb)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.remove(sb, "deleted")
	}()
	writeJSON(w, http.StatusOK, v)
}

// remove ends sb: gone from every answer, its machine destroyed.
func (s *Server) remove(sb *sandbox, why string) {
	s.mu.Lock()
	if sb.gone {
		s.mu.Unlock()
		return
	}
	sb.gone = true
	sb.epoch++
	delete(s.sandboxes, sb.id)
	m := sb.machine
	sessions := sb.sessions
	sb.sessions = nil
	s.mu.Unlock()
	s.log.Info("daytonafake: sandbox ends", "sandbox", sb.id, "why", why)
	for _, ss := range sessions {
		ss.end()
	}
	sb.closeConns()
	if m == nil {
		return // makeMachine destroys it when it comes
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Destroy(ctx); err != nil {
		s.log.Error("daytonafake: destroy a machine", "sandbox", sb.id, "err", err)
	}
}

// Vanish ends a sandbox as if Daytona lost it: its machine destroyed, the
// sandbox gone from every answer. It reports whether there was one of
// that id or name.
func (s *Server) Vanish(idOrName string) bool {
	s.mu.Lock()
	sb := s.find(idOrName)
	s.mu.Unlock()
	if sb == nil {
		return false
	}
	s.remove(sb, "vanished")
	return true
}

// Sandboxes lists the ids of the sandboxes that exist, in any state.
func (s *Server) Sandboxes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// State is the state of the sandbox of an id or name ("started",
// "stopped", ...), or "" when there is none.
func (s *Server) State(idOrName string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.find(idOrName); sb != nil {
		return sb.state
	}
	return ""
}

// Machine is the machine of the sandbox of an id or name, nil while it
// is being made or when there is no such sandbox.
func (s *Server) Machine(idOrName string) *remotefake.Machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.find(idOrName); sb != nil {
		return sb.machine
	}
	return nil
}

func (s *Server) start(w http.ResponseWriter, r *http.Request, idOrName string) {
	s.mu.Lock()
	sb := s.find(idOrName)
	switch {
	case sb == nil:
		s.mu.Unlock()
		notFound(w, r, idOrName)
		return
	case sb.state == stateStarted:
		v := s.sandboxJSON(sb)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, v)
		return
	case sb.state == stateError:
		s.mu.Unlock()
		writeAPIError(w, r, http.StatusBadRequest, "Sandbox is in an errored state")
		return
	case sb.pending():
		s.mu.Unlock()
		stateChangeInProgress(w, r)
		return
	}
	if msg := s.overQuota(sb, true); msg != "" {
		s.mu.Unlock()
		writeAPIError(w, r, http.StatusBadRequest, msg)
		return
	}
	next := stateStarting
	if sb.state == stateArchived {
		next = stateRestoring
	}
	epoch := sb.setState(next, stateStarted)
	v := s.sandboxJSON(sb)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.finishStart(sb, epoch)
	}()
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request, idOrName string) {
	s.mu.Lock()
	sb := s.find(idOrName)
	switch {
	case sb == nil:
		s.mu.Unlock()
		notFound(w, r, idOrName)
		return
	case sb.state == stateStarted:
	case sb.pending():
		s.mu.Unlock()
		stateChangeInProgress(w, r)
		return
	default:
		s.mu.Unlock()
		writeAPIError(w, r, http.StatusBadRequest, "Sandbox is not started")
		return
	}
	epoch := s.beginStop(sb)
	v := s.sandboxJSON(sb)
	s.mu.Unlock()
	s.wg.Add(1)
	go s.finishStop(sb, epoch)
	writeJSON(w, http.StatusOK, v)
}

// beginStop moves sb to stopping. Callers hold s.mu and then run
// finishStop.
func (s *Server) beginStop(sb *sandbox) int {
	return sb.setState(stateStopping, stateStopped)
}

// finishStop kills every process of sb's machine (its sessions' shells
// among them) and closes the previews' connections into it, then moves
// it to stopped.
func (s *Server) finishStop(sb *sandbox, epoch int) {
	defer s.wg.Done()
	s.mu.Lock()
	sessions := sb.sessions
	sb.sessions = nil
	m := sb.machine
	s.mu.Unlock()
	for _, ss := range sessions {
		ss.end()
	}
	sb.closeConns()
	if m != nil {
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		err := m.KillAll(ctx)
		cancel()
		if err != nil {
			s.log.Error("daytonafake: stop a machine", "sandbox", sb.id, "err", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.gone || sb.epoch != epoch {
		return
	}
	sb.setState(stateStopped, stateStopped)
	sb.stoppedAt = time.Now()
}

func (s *Server) archive(w http.ResponseWriter, r *http.Request, idOrName string) {
	s.mu.Lock()
	sb := s.find(idOrName)
	switch {
	case sb == nil:
		s.mu.Unlock()
		notFound(w, r, idOrName)
		return
	case sb.state == stateArchived:
	case sb.pending():
		s.mu.Unlock()
		stateChangeInProgress(w, r)
		return
	case sb.state != stateStopped:
		s.mu.Unlock()
		writeAPIError(w, r, http.StatusBadRequest, "Sandbox is not stopped")
		return
	default:
		s.archiveLocked(sb)
	}
	v := s.sandboxJSON(sb)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

// archiveLocked moves a stopped sb to archiving, and soon to archived:
// its files stay in its machine, whose processes are gone already.
// Callers hold s.mu.
func (s *Server) archiveLocked(sb *sandbox) {
	epoch := sb.setState(stateArchiving, stateArchived)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-time.After(10 * time.Millisecond):
		case <-s.ctx.Done():
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if !sb.gone && sb.epoch == epoch {
			sb.setState(stateArchived, stateArchived)
		}
	}()
}

// setInterval serves autostop, autoarchive and autodelete.
func (s *Server) setInterval(w http.ResponseWriter, r *http.Request, idOrName, which, value string) {
	f, err := strconv.ParseFloat(value, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<31 {
		writeAPIError(w, r, http.StatusBadRequest, "Invalid interval")
		return
	}
	n := int(f)
	switch {
	case which == "autostop" && n < 0:
		writeAPIError(w, r, http.StatusBadRequest, "Auto-stop interval must be non-negative")
		return
	case which == "autoarchive" && n < 0:
		writeAPIError(w, r, http.StatusBadRequest, "Auto-archive interval must be non-negative")
		return
	}
	s.withSandbox(w, r, idOrName, func(sb *sandbox) {
		switch which {
		case "autostop":
			sb.autoStop = n
		case "autoarchive":
			if n == 0 {
				n = maxAutoArchive
			}
			sb.autoArchive = n
		default:
			sb.autoDelete = n
		}
		sb.touch()
		writeJSON(w, http.StatusOK, s.sandboxJSON(sb))
	})
}

func (s *Server) replaceLabels(w http.ResponseWriter, r *http.Request, idOrName string) {
	var req struct {
		Labels map[string]string `json:"labels"`
	}
	if err := decode(r, &req); err != nil {
		writeAPIError(w, r, http.StatusBadRequest, "Invalid request body")
		return
	}
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	s.withSandbox(w, r, idOrName, func(sb *sandbox) {
		sb.labels = req.Labels
		sb.touch()
		writeJSON(w, http.StatusOK, map[string]any{"labels": sb.labels})
	})
}

// setNetwork changes a sandbox's outbound policy: the fields given
// replace the sandbox's, those left out stay. The fake's machines have
// no network of their own: the policy is kept and answered, not
// enforced.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request, idOrName string) {
	var req struct {
		BlockAll  *bool   `json:"networkBlockAll"`
		AllowList *string `json:"networkAllowList"`
	}
	if err := decode(r, &req); err != nil {
		writeAPIError(w, r, http.StatusBadRequest, "Invalid request body")
		return
	}
	s.withSandbox(w, r, idOrName, func(sb *sandbox) {
		if req.BlockAll != nil {
			sb.blockAll = *req.BlockAll
		}
		if req.AllowList != nil {
			sb.allowList = req.AllowList
		}
		sb.touch()
		writeJSON(w, http.StatusOK, s.sandboxJSON(sb))
	})
}

func (s *Server) previewURL(w http.ResponseWriter, r *http.Request, idOrName, portText string) {
	port, err := strconv.ParseFloat(portText, 64)
	if err != nil || port != math.Trunc(port) || port < 1 || port > 65535 {
		writeAPIError(w, r, http.StatusBadRequest, "Invalid port")
		return
	}
	s.withSandbox(w, r, idOrName, func(sb *sandbox) {
		writeJSON(w, http.StatusOK, map[string]any{
			"sandboxId": sb.id,
			"url":       s.PreviewURL(sb.id, int(port)),
			"token":     sb.previewToken,
		})
	})
}

// PreviewURL is the URL of a sandbox's port through the preview proxy,
// as GET /sandbox/{id}/ports/{port}/preview-url answers it.
func (s *Server) PreviewURL(id string, port int) string {
	return s.srv.URL + "/preview/" + id + "/" + strconv.Itoa(port)
}

// reap stops, archives and deletes sandboxes past their intervals.
func (s *Server) reap() {
	defer s.wg.Done()
	tick := min(max(s.minute/20, 5*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var deletes []*sandbox
		s.mu.Lock()
		for _, sb := range s.sandboxes {
			switch sb.state {
			case stateStarted:
				if sb.autoStop > 0 && sb.inflight == 0 && now.Sub(sb.activity) >= time.Duration(sb.autoStop)*s.minute {
					s.log.Info("daytonafake: auto-stop", "sandbox", sb.id)
					epoch := s.beginStop(sb)
					s.wg.Add(1)
					go s.finishStop(sb, epoch)
				}
			case stateStopped:
				idle := now.Sub(sb.stoppedAt)
				if sb.autoDelete >= 0 && idle >= time.Duration(sb.autoDelete)*s.minute {
					deletes = append(deletes, sb)
				} else if sb.autoArchive > 0 && idle >= time.Duration(sb.autoArchive)*s.minute {
					s.archiveLocked(sb)
				}
			}
		}
		s.mu.Unlock()
		for _, sb := range deletes {
			s.remove(sb, "auto-delete")
		}
	}
}

// Resources is the size Daytona gave the sandbox of an id or name: its
// vCPUs and its memory and disk in GiB; zeros when there is none.
func (s *Server) Resources(idOrName string) (cpu, memoryGiB, diskGiB int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.find(idOrName); sb != nil {
		return sb.cpu, sb.mem, sb.disk
	}
	return 0, 0, 0
}

// Network returns the outbound policy Daytona holds for a sandbox: its
// networkBlockAll and networkAllowList ("" when none is set).
func (s *Server) Network(idOrName string) (blockAll bool, allowList string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.find(idOrName); sb != nil {
		if sb.allowList != nil {
			allowList = *sb.allowList
		}
		return sb.blockAll, allowList
	}
	return false, ""
}
