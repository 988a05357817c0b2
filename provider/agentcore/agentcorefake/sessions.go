package agentcorefake

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

const (
	statusReady      = "READY"
	statusTerminated = "TERMINATED"
)

// defaultTimeout is a session's when its start names none.
const defaultTimeout = 900 * time.Second

// keepTerminated is how long a terminated session is still listed.
const keepTerminated = 10 * time.Minute

// session is one Code Interpreter session.
type session struct {
	id, name, ci string
	created      time.Time
	timeout      time.Duration
	machine      *remotefake.Machine

	// Under Server.mu.
	status  string
	updated time.Time
	timer   *time.Timer

	taskMu sync.Mutex
	tasks  map[string]*task
}

type summary struct {
	CodeInterpreterIdentifier string `json:"codeInterpreterIdentifier"`
	SessionID                 string `json:"sessionId"`
	Name                      string `json:"name,omitempty"`
	Status                    string `json:"status"`
	CreatedAt                 string `json:"createdAt"`
	LastUpdatedAt             string `json:"lastUpdatedAt,omitempty"`
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func (s *Server) start(w http.ResponseWriter, req *request) {
	var in struct {
		Name                     *string `json:"name"`
		SessionTimeoutSeconds    *int    `json:"sessionTimeoutSeconds"`
		ClientToken              *string `json:"clientToken"`
		Certificates             any     `json:"certificates"`
		FilesystemConfigurations any     `json:"filesystemConfigurations"`
	}
	if !s.decode(w, req, &in) {
		return
	}
	timeout := defaultTimeout
	if in.SessionTimeoutSeconds != nil {
		timeout = time.Duration(*in.SessionTimeoutSeconds) * time.Second
		if timeout < time.Second || timeout > s.opts.MaxTimeout {
			s.invalid(w, req, "sessionTimeoutSeconds %d is not within 1 to %d", *in.SessionTimeoutSeconds, int(s.opts.MaxTimeout/time.Second))
			return
		}
	}
	name := ""
	if in.Name != nil {
		name = *in.Name
		if len(name) < 1 || len(name) > 100 {
			s.invalid(w, req, "name of %d characters, not 1 to 100", len(name))
			return
		}
	}
	token := ""
	if in.ClientToken != nil {
		token = *in.ClientToken
		if len(token) < 33 || len(token) > 256 || !tokenRE.MatchString(token) {
			s.invalid(w, req, "clientToken %q breaks its constraints", token)
			return
		}
	}
	s.mu.Lock()
	if id, ok := s.tokens[token]; ok && token != "" {
		ss := s.sessions[id]
		s.mu.Unlock()
		if ss != nil {
			// The service ignores a request whose token it has seen.
			writeJSON(w, map[string]string{"codeInterpreterIdentifier": ss.ci, "sessionId": ss.id, "createdAt": stamp(ss.created)})
			return
		}
		s.mu.Lock()
	}
	ready := 0
	for _, ss := range s.sessions {
		if ss.status == statusReady {
			ready++
		}
	}
	if ready >= s.opts.MaxSessions {
		s.mu.Unlock()
		writeError(w, "ServiceQuotaExceededException", 402, "The maximum number of concurrent sessions ("+strconv.Itoa(s.opts.MaxSessions)+") has been reached.")
		return
	}
	if s.closed {
		s.mu.Unlock()
		writeError(w, "InternalServerException", 500, "shutting down")
		return
	}
	id := newID()[:24]
	ss := &session{id: id, name: name, ci: req.ci, created: time.Now(), timeout: timeout, status: "STARTING", tasks: map[string]*task{}}
	s.sessions[id] = ss
	if token != "" {
		s.tokens[token] = id
	}
	s.mu.Unlock()
	m, err := s.opts.Farm.Create(context.WithoutCancel(req.r.Context()), id, nil)
	s.mu.Lock()
	if err != nil {
		delete(s.sessions, id)
		delete(s.tokens, token)
		s.mu.Unlock()
		writeError(w, "InternalServerException", 500, "the session could not start")
		return
	}
	ss.machine, ss.status, ss.updated = m, statusReady, time.Now()
	ss.timer = time.AfterFunc(time.Until(ss.created.Add(timeout)), func() { s.end(ss, "its timeout") })
	s.mu.Unlock()
	s.log.Info("agentcorefake: session started", "session", id, "name", name, "timeout", timeout)
	writeJSON(w, map[string]string{"codeInterpreterIdentifier": ss.ci, "sessionId": ss.id, "createdAt": stamp(ss.created)})
}

// end terminates a session: its machine and every process in it go.
func (s *Server) end(ss *session, why string) {
	s.mu.Lock()
	if ss.status == statusTerminated {
		s.mu.Unlock()
		return
	}
	ss.status, ss.updated = statusTerminated, time.Now()
	if ss.timer != nil {
		ss.timer.Stop()
	}
	m := ss.machine
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	s.log.Info("agentcorefake: session terminated", "session", ss.id, "why", why)
	if m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = m.Destroy(ctx)
	}
	time.AfterFunc(keepTerminated, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.sessions, ss.id)
	})
}

// Vanish ends the session id as the service would on its own (a host
// lost), and says whether there was one READY.
func (s *Server) Vanish(id string) bool {
	s.mu.Lock()
	ss := s.sessions[id]
	ok := ss != nil && ss.status == statusReady
	s.mu.Unlock()
	if ok {
		s.end(ss, "vanished")
	}
	return ok
}

// Machine is the machine of READY session id, or nil.
func (s *Server) Machine(id string) *remotefake.Machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[id]; ss != nil && ss.status == statusReady {
		return ss.machine
	}
	return nil
}

// lookup is session id of the request's code interpreter, or nil.
func (s *Server) lookup(req *request, id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[id]; ss != nil && ss.ci == req.ci {
		return ss
	}
	return nil
}

func (s *Server) sessionParam(w http.ResponseWriter, req *request) (*session, bool) {
	id := req.r.URL.Query().Get("sessionId")
	if !sessionIDRE.MatchString(id) {
		s.invalid(w, req, "sessionId %q breaks its pattern", id)
		return nil, false
	}
	ss := s.lookup(req, id)
	if ss == nil {
		writeError(w, "ResourceNotFoundException", 404, "session "+id+" not found")
		return nil, false
	}
	return ss, true
}

func (s *Server) get(w http.ResponseWriter, req *request) {
	ss, ok := s.sessionParam(w, req)
	if !ok {
		return
	}
	s.mu.Lock()
	out := map[string]any{
		"codeInterpreterIdentifier": ss.ci, "sessionId": ss.id, "createdAt": stamp(ss.created),
		"sessionTimeoutSeconds": int(ss.timeout / time.Second), "status": ss.status,
	}
	if ss.name != "" {
		out["name"] = ss.name
	}
	s.mu.Unlock()
	writeJSON(w, out)
}

func (s *Server) list(w http.ResponseWriter, req *request) {
	var in struct {
		MaxResults *int    `json:"maxResults"`
		NextToken  *string `json:"nextToken"`
		Status     *string `json:"status"`
	}
	if !s.decode(w, req, &in) {
		return
	}
	limit := 10
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 100 {
			s.invalid(w, req, "maxResults %d is not within 1 to 100", *in.MaxResults)
			return
		}
		limit = *in.MaxResults
	}
	if in.Status != nil && *in.Status != statusReady && *in.Status != statusTerminated {
		s.invalid(w, req, "status %q", *in.Status)
		return
	}
	from := 0
	if in.NextToken != nil {
		n, err := strconv.Atoi(*in.NextToken)
		if err != nil || n < 0 {
			s.invalid(w, req, "nextToken %q is not one the fake gave", *in.NextToken)
			return
		}
		from = n
	}
	s.mu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		if ss.ci == req.ci && (ss.status == statusReady || ss.status == statusTerminated) &&
			(in.Status == nil || *in.Status == ss.status) {
			all = append(all, ss)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].created.Equal(all[j].created) {
			return all[i].created.After(all[j].created)
		}
		return all[i].id < all[j].id
	})
	items := []summary{}
	for i := from; i < len(all) && i < from+limit; i++ {
		ss := all[i]
		items = append(items, summary{CodeInterpreterIdentifier: ss.ci, SessionID: ss.id, Name: ss.name,
			Status: ss.status, CreatedAt: stamp(ss.created), LastUpdatedAt: stamp(ss.updated)})
	}
	s.mu.Unlock()
	out := map[string]any{"items": items}
	if from+limit < len(all) {
		out["nextToken"] = strconv.Itoa(from + limit)
	}
	writeJSON(w, out)
}

func (s *Server) stop(w http.ResponseWriter, req *request) {
	var in struct {
		ClientToken *string `json:"clientToken"`
	}
	if !s.decode(w, req, &in) {
		return
	}
	ss, ok := s.sessionParam(w, req)
	if !ok {
		return
	}
	s.mu.Lock()
	gone := ss.status == statusTerminated
	s.mu.Unlock()
	if gone {
		writeError(w, "ResourceNotFoundException", 404, "session "+ss.id+" is terminated")
		return
	}
	s.end(ss, "stopped")
	writeJSON(w, map[string]string{"codeInterpreterIdentifier": ss.ci, "sessionId": ss.id, "lastUpdatedAt": stamp(time.Now())})
}
