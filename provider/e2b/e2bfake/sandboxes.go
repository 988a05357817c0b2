package e2bfake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// The fake's answers for what the spec leaves to E2B.
const (
	envdVersion    = "0.2.0"
	defaultTimeout = 15 * time.Second // NewSandbox.timeout's default
	defaultUser    = "user"           // the user envd acts as when none is given
)

// sandbox is one sandbox of the fake.
type sandbox struct {
	id, templateID string
	metadata       map[string]string
	envVars        map[string]string
	startedAt      time.Time
	autoPause      bool
	envdToken      string // empty unless created secure
	machine        *remotefake.Machine

	// Guarded by Server.mu: the egress rules, as E2B keeps them. The
	// fake's machines have no network of their own: the rules are
	// kept, checked against the spec, and answered, not enforced.
	internet *bool
	network  *egressRules

	// Guarded by Server.mu.
	endAt  time.Time
	paused bool
	gone   bool
	timer  *time.Timer

	procMu sync.Mutex
	procs  map[uint32]*remotefake.Process

	connMu      sync.Mutex
	conns       map[*trackedConn]bool // proxied connections into it
	connsClosed bool
}

// egressRules are the spec's SandboxNetworkConfig, as far as berth sets
// it.
type egressRules struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serveAPI serves the control API.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if !s.delay(r) {
		return
	}
	if r.Header.Get("X-API-Key") != s.opts.APIKey {
		s.count("unauthorized")
		writeError(w, http.StatusUnauthorized, "Invalid API key, please visit https://e2b.dev/docs/api-key")
		return
	}
	s.validated(w, r, s.apiRouter, func(w http.ResponseWriter, r *http.Request, p map[string]string) {
		id := p["sandboxID"]
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/sandboxes":
			s.create(w, r)
		case r.Method == http.MethodGet && r.URL.Path == "/v2/sandboxes":
			s.list(w, r)
		case r.Method == http.MethodGet && id != "" && r.URL.Path == "/sandboxes/"+id:
			s.get(w, id)
		case r.Method == http.MethodDelete && id != "" && r.URL.Path == "/sandboxes/"+id:
			s.delete(w, id)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pause"):
			s.pause(w, r, id)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/connect"):
			s.connect(w, r, id)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/timeout"):
			s.setTimeout(w, r, id)
		case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/network"):
			s.setNetwork(w, r, id)
		default:
			writeError(w, http.StatusNotImplemented, "the fake does not serve this operation")
		}
	})
}

// decode reads a JSON request body the validator has checked.
func decode(r *http.Request, v any) error {
	return json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v)
}

func (s *Server) checkTimeout(w http.ResponseWriter, seconds *int32) (time.Duration, bool) {
	if seconds == nil {
		return defaultTimeout, true
	}
	if *seconds <= 0 {
		writeError(w, http.StatusBadRequest, "Timeout must be greater than 0")
		return 0, false
	}
	d := time.Duration(*seconds) * time.Second
	if d > s.opts.MaxTimeout {
		writeError(w, http.StatusBadRequest, "Timeout cannot be greater than "+s.opts.MaxTimeout.String())
		return 0, false
	}
	return d, true
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TemplateID string            `json:"templateID"`
		Timeout    *int32            `json:"timeout"`
		AutoPause  bool              `json:"autoPause"`
		Secure     bool              `json:"secure"`
		Metadata   map[string]string `json:"metadata"`
		EnvVars    map[string]string `json:"envVars"`
		Internet   *bool             `json:"allow_internet_access"`
		Network    *egressRules      `json:"network"`
	}
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "unreadable body")
		return
	}
	if len(s.opts.Templates) > 0 && !slices.Contains(s.opts.Templates, req.TemplateID) {
		writeError(w, http.StatusBadRequest, "template '"+req.TemplateID+"' not found")
		return
	}
	timeout, ok := s.checkTimeout(w, req.Timeout)
	if !ok {
		return
	}
	s.mu.Lock()
	if len(s.sandboxes) >= s.opts.MaxSandboxes {
		s.mu.Unlock()
		writeError(w, http.StatusTooManyRequests, "you have reached the maximum number of concurrent E2B sandboxes (20). If you need more, please visit 'https://e2b.dev/docs/billing'")
		return
	}
	s.mu.Unlock()
	sb := &sandbox{
		id: "i" + randomID(10), templateID: req.TemplateID,
		metadata: req.Metadata, envVars: req.EnvVars,
		startedAt: time.Now().UTC(), autoPause: req.AutoPause,
		procs:    map[uint32]*remotefake.Process{},
		internet: req.Internet, network: req.Network,
	}
	if req.Secure {
		sb.envdToken = randomID(16)
	}
	m, err := s.opts.Farm.Create(r.Context(), sb.id, req.EnvVars)
	if err != nil {
		s.log.Error("e2bfake: make a machine", "err", err)
		writeError(w, http.StatusInternalServerError, "Failed to create sandbox")
		return
	}
	sb.machine = m
	s.mu.Lock()
	s.sandboxes[sb.id] = sb
	s.arm(sb, timeout)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
}

// arm sets sb to end timeout from now. Callers hold s.mu.
func (s *Server) arm(sb *sandbox, timeout time.Duration) {
	sb.endAt = time.Now().Add(timeout).UTC()
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.timer = time.AfterFunc(timeout, func() { s.expire(sb) })
}

// expire ends sb at its timeout: killed, or paused with autoPause.
func (s *Server) expire(sb *sandbox) {
	s.mu.Lock()
	if sb.gone || sb.paused || time.Now().Before(sb.endAt) {
		s.mu.Unlock()
		return
	}
	if sb.autoPause {
		sb.paused = true
		s.mu.Unlock()
		if err := sb.machine.Pause(s.ctx); err != nil {
			s.log.Error("e2bfake: auto-pause", "sandbox", sb.id, "err", err)
		}
		return
	}
	s.mu.Unlock()
	s.kill(sb, "timeout")
}

// kill ends sb and its machine.
func (s *Server) kill(sb *sandbox, why string) {
	s.mu.Lock()
	if sb.gone {
		s.mu.Unlock()
		return
	}
	sb.gone = true
	delete(s.sandboxes, sb.id)
	if sb.timer != nil {
		sb.timer.Stop()
	}
	s.mu.Unlock()
	s.log.Info("e2bfake: sandbox ends", "sandbox", sb.id, "why", why)
	sb.closeConns()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.machine.Destroy(ctx); err != nil {
		s.log.Error("e2bfake: destroy a machine", "sandbox", sb.id, "err", err)
	}
}

// Vanish ends a sandbox as if E2B lost it: its machine destroyed, the
// sandbox gone from every answer. It reports whether there was one.
func (s *Server) Vanish(id string) bool {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		return false
	}
	s.kill(sb, "vanished")
	return true
}

// Sandboxes lists the ids of the sandboxes that exist, running or paused.
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

// lookup returns the sandbox id names, or nil.
func (s *Server) lookup(id string) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sandboxes[id]
}

func notFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, "sandbox \""+id+"\" doesn't exist or you don't have access to it")
}

func (s *Server) sandboxJSON(sb *sandbox) map[string]any {
	v := map[string]any{
		"templateID":  sb.templateID,
		"sandboxID":   sb.id,
		"clientID":    "6532622b",
		"envdVersion": envdVersion,
	}
	if sb.envdToken != "" {
		v["envdAccessToken"] = sb.envdToken
	}
	return v
}

// listedJSON is the spec's ListedSandbox; detail adds SandboxDetail's.
// Callers hold s.mu.
func (s *Server) listedJSON(sb *sandbox, detail bool) map[string]any {
	state := "running"
	if sb.paused {
		state = "paused"
	}
	v := map[string]any{
		"templateID":  sb.templateID,
		"sandboxID":   sb.id,
		"clientID":    "6532622b",
		"startedAt":   sb.startedAt.Format(time.RFC3339Nano),
		"endAt":       sb.endAt.Format(time.RFC3339Nano),
		"cpuCount":    2,
		"memoryMB":    512,
		"diskSizeMB":  1024,
		"state":       state,
		"envdVersion": envdVersion,
	}
	if sb.metadata != nil {
		v["metadata"] = sb.metadata
	}
	if detail && sb.envdToken != "" {
		v["envdAccessToken"] = sb.envdToken
	}
	if detail {
		v["allowInternetAccess"] = sb.internet
		if sb.network != nil {
			v["network"] = sb.network
		}
	}
	return v
}

func (s *Server) get(w http.ResponseWriter, id string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	if sb == nil {
		s.mu.Unlock()
		notFound(w, id)
		return
	}
	v := s.listedJSON(sb, true)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var filter url.Values
	if md := q.Get("metadata"); md != "" {
		var err error
		if filter, err = url.ParseQuery(md); err != nil {
			writeError(w, http.StatusBadRequest, "Error parsing metadata")
			return
		}
	}
	states := []string{"running", "paused"}
	if st := q.Get("state"); st != "" {
		states = strings.Split(st, ",")
	}
	s.mu.Lock()
	out := []map[string]any{}
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		sb := s.sandboxes[id]
		state := "running"
		if sb.paused {
			state = "paused"
		}
		if !slices.Contains(states, state) {
			continue
		}
		match := true
		for k := range filter {
			if v, ok := sb.metadata[k]; !ok || v != filter.Get(k) {
				match = false
			}
		}
		if match {
			out = append(out, s.listedJSON(sb, false))
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) delete(w http.ResponseWriter, id string) {
	sb := s.lookup(id)
	if sb == nil {
		notFound(w, id)
		return
	}
	s.kill(sb, "deleted")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	switch {
	case sb == nil:
		s.mu.Unlock()
		notFound(w, id)
		return
	case sb.paused:
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "Sandbox \""+id+"\" is already paused")
		return
	}
	sb.paused = true
	sb.timer.Stop()
	s.mu.Unlock()
	if err := sb.machine.Pause(r.Context()); err != nil {
		s.log.Error("e2bfake: pause", "sandbox", id, "err", err)
		writeError(w, http.StatusInternalServerError, "Error pausing sandbox")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) connect(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		Timeout *int32 `json:"timeout"`
	}
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "unreadable body")
		return
	}
	timeout, ok := s.checkTimeout(w, req.Timeout)
	if !ok {
		return
	}
	s.mu.Lock()
	sb := s.sandboxes[id]
	if sb == nil {
		s.mu.Unlock()
		notFound(w, id)
		return
	}
	if !sb.paused {
		// TTL is only extended.
		if time.Now().Add(timeout).After(sb.endAt) {
			s.arm(sb, timeout)
		}
		v := s.sandboxJSON(sb)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, v)
		return
	}
	s.mu.Unlock()
	if err := sb.machine.Resume(r.Context()); err != nil {
		s.log.Error("e2bfake: resume", "sandbox", id, "err", err)
		writeError(w, http.StatusInternalServerError, "Error resuming sandbox")
		return
	}
	s.mu.Lock()
	sb.paused = false
	s.arm(sb, timeout)
	v := s.sandboxJSON(sb)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, v)
}

// setNetwork replaces a running sandbox's egress rules, as
// SandboxNetworkUpdateConfig says: a field left out clears its own.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		egressRules
		Internet *bool `json:"allow_internet_access"`
	}
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "unreadable body")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	switch {
	case sb == nil:
		notFound(w, id)
		return
	case sb.paused:
		writeError(w, http.StatusConflict, "sandbox "+id+" is paused")
		return
	}
	sb.internet, sb.network = req.Internet, nil
	if len(req.AllowOut)+len(req.DenyOut) > 0 {
		rules := req.egressRules
		sb.network = &rules
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		Timeout *int32 `json:"timeout"`
	}
	if err := decode(r, &req); err != nil || req.Timeout == nil {
		writeError(w, http.StatusBadRequest, "unreadable body")
		return
	}
	timeout, ok := s.checkTimeout(w, req.Timeout)
	if !ok {
		return
	}
	s.mu.Lock()
	sb := s.sandboxes[id]
	if sb == nil || sb.paused {
		s.mu.Unlock()
		notFound(w, id)
		return
	}
	s.arm(sb, timeout)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
