package e2bapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/internal/svcerr"
)

// SandboxRef is what reaching a sandbox's ports takes: its id, the
// domain and tokens create or connect answered.
type SandboxRef struct {
	ID string
	// Domain is the sandbox's own domain, if E2B said one.
	Domain string
	// EnvdAccessToken is sent to envd as X-Access-Token (secure sandboxes).
	EnvdAccessToken string
	// TrafficAccessToken is sent to every port as
	// E2b-Traffic-Access-Token (sandboxes closed to public traffic).
	TrafficAccessToken string
}

// Ref is the reference to a sandbox that create or connect answered.
func (sb Sandbox) Ref() SandboxRef {
	r := SandboxRef{ID: sb.SandboxID, EnvdAccessToken: sb.EnvdAccessToken}
	if sb.Domain != nil {
		r.Domain = *sb.Domain
	}
	if sb.TrafficAccessToken != nil {
		r.TrafficAccessToken = *sb.TrafficAccessToken
	}
	return r
}

// PortURL says how to reach port of the sandbox: the base URL, and the
// headers every request must carry (routing on the stable host, the
// traffic token).
func (c *Client) PortURL(sb SandboxRef, port int) (string, http.Header, error) {
	if err := checkID(sb.ID); err != nil {
		return "", nil, err
	}
	if port <= 0 || port > 65535 {
		return "", nil, fmt.Errorf("e2b: port %d: %w", port, errdefs.ErrBadInput)
	}
	h := http.Header{}
	if sb.TrafficAccessToken != "" {
		h.Set(HeaderTrafficToken, sb.TrafficAccessToken)
	}
	if c.sandboxURL != nil {
		h.Set(HeaderSandboxID, sb.ID)
		h.Set(HeaderSandboxPort, strconv.Itoa(port))
		return c.sandboxURL.String(), h, nil
	}
	domain := c.domain
	if domain == "" {
		domain = sb.Domain
	}
	if domain == "" {
		domain = DefaultDomain
	}
	if strings.ContainsAny(domain, "/?#@ ") {
		return "", nil, fmt.Errorf("e2b: domain %q: %w", domain, errdefs.ErrBadInput)
	}
	return fmt.Sprintf("https://%d-%s.%s", port, sb.ID, domain), h, nil
}

// envdRequest makes a request to envd of sb.
func (c *Client) envdRequest(ctx context.Context, sb SandboxRef, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	base, h, err := c.PortURL(sb, EnvdPort)
	if err != nil {
		return nil, err
	}
	u := base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("e2b: envd request: %w", errdefs.ErrBadInput)
	}
	req.Header = h
	if sb.EnvdAccessToken != "" {
		req.Header.Set(HeaderAccessToken, sb.EnvdAccessToken)
	}
	return req, nil
}

// userAuth is how envd learns the user to act as: HTTP basic auth with
// the user's name and no password (packages/envd/internal/permissions).
func userAuth(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// ProcessConfig is process.ProcessConfig in proto JSON.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// StartRequest is process.StartRequest in proto JSON (no pty: berth's
// processes are not terminals).
type StartRequest struct {
	Process ProcessConfig `json:"process"`
	Tag     *string       `json:"tag,omitempty"`
	// Stdin keeps the process's stdin open for SendInput; envd's default
	// is true, so false is sent for a process that reads none.
	Stdin *bool `json:"stdin,omitempty"`
}

// StartResponse is process.StartResponse in proto JSON.
type StartResponse struct {
	Event *ProcessEvent `json:"event,omitempty"`
}

// ProcessEvent is process.ProcessEvent: one of its fields is set (the
// oneof "event").
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

// StartEvent is ProcessEvent.StartEvent.
type StartEvent struct {
	PID uint32 `json:"pid,omitempty"`
}

// DataEvent is ProcessEvent.DataEvent: one of its fields is set; proto
// JSON's bytes are base64, as encoding/json's []byte.
type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Pty    []byte `json:"pty,omitempty"`
}

// EndEvent is ProcessEvent.EndEvent.
type EndEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

// ProcessSelector is process.ProcessSelector: one of its fields set.
type ProcessSelector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// Signal is process.Signal, as proto JSON names its values.
type Signal string

const (
	SIGTERM Signal = "SIGNAL_SIGTERM"
	SIGKILL Signal = "SIGNAL_SIGKILL"
)

// SendSignalRequest is process.SendSignalRequest.
type SendSignalRequest struct {
	Process ProcessSelector `json:"process"`
	Signal  Signal          `json:"signal"`
}

// StartOptions are a Start's request options.
type StartOptions struct {
	// User runs the process ("root", "user"); empty means envd's default.
	User string
	// Timeout, when not zero, is sent as Connect-Timeout-Ms, and envd
	// kills the process when it passes, whether or not the stream is
	// still read. Zero sends none: the process runs until it exits.
	Timeout time.Duration
}

// Connect protocol framing (connectrpc.com/docs/protocol): each message
// of a stream is a flag byte, a 4-byte big-endian length, the message;
// the flag endStream marks the last, a JSON end-of-stream message.
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
	// maxFrame bounds one message envd sends: a data event holds at
	// most a read of the process's output.
	maxFrame = 4 << 20
)

// ProcessStream is the event stream of a Start.
type ProcessStream struct {
	c    *Client
	ctx  context.Context
	body io.ReadCloser
	r    *bufio.Reader
	done bool
}

// Start starts a process in the sandbox (process.Process/Start, a
// server stream). Its first event is normally the start event with the
// process's pid; closing the stream leaves the process running unless
// opts.Timeout was set.
func (c *Client) Start(ctx context.Context, sb SandboxRef, req StartRequest, opts StartOptions) (*ProcessStream, error) {
	const op = "envd start"
	msg, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("e2b: %s: %w", op, err)
	}
	frame := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(msg)))
	copy(frame[5:], msg)
	hreq, err := c.envdRequest(ctx, sb, http.MethodPost, "/process.Process/Start", nil, bytes.NewReader(frame))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/connect+json")
	hreq.Header.Set("Connect-Protocol-Version", "1")
	if opts.User != "" {
		hreq.Header.Set("Authorization", userAuth(opts.User))
	}
	if opts.Timeout > 0 {
		hreq.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(max(opts.Timeout.Milliseconds(), 1), 10))
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return nil, c.transportError(ctx, op, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, c.connectError(op, resp)
	}
	return &ProcessStream{c: c, ctx: ctx, body: resp.Body, r: bufio.NewReader(resp.Body)}, nil
}

// Next returns the stream's next event; io.EOF after the last.
func (s *ProcessStream) Next() (ProcessEvent, error) {
	const op = "envd start"
	if s.done {
		return ProcessEvent{}, io.EOF
	}
	var hdr [5]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		s.done = true
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // a stream ends with its end message
		}
		return ProcessEvent{}, s.c.transportError(s.ctx, op, err)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		s.done = true
		return ProcessEvent{}, fmt.Errorf("e2b: %s: a message of %d bytes: %w", op, n, errdefs.ErrProviderUnavailable)
	}
	if hdr[0]&flagCompressed != 0 {
		s.done = true
		return ProcessEvent{}, fmt.Errorf("e2b: %s: a compressed message, never asked for: %w", op, errdefs.ErrProviderUnavailable)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(s.r, buf); err != nil {
		s.done = true
		return ProcessEvent{}, s.c.transportError(s.ctx, op, err)
	}
	if hdr[0]&flagEndStream != 0 {
		s.done = true
		var end struct {
			Error *connectErr `json:"error"`
		}
		if err := json.Unmarshal(buf, &end); err != nil {
			return ProcessEvent{}, fmt.Errorf("e2b: %s: unreadable end of stream: %w", op, errdefs.ErrProviderUnavailable)
		}
		if end.Error != nil {
			return ProcessEvent{}, s.c.connectCodeError(op, end.Error)
		}
		return ProcessEvent{}, io.EOF
	}
	var resp StartResponse
	if err := json.Unmarshal(buf, &resp); err != nil {
		s.done = true
		return ProcessEvent{}, fmt.Errorf("e2b: %s: unreadable event: %s: %w", op, oneLine(err.Error()), errdefs.ErrProviderUnavailable)
	}
	if resp.Event == nil {
		return ProcessEvent{}, nil
	}
	return *resp.Event, nil
}

// Close ends the stream (not the process).
func (s *ProcessStream) Close() error {
	s.done = true
	return s.body.Close()
}

// StartDetached starts a process and returns its pid once envd says it
// started, closing the stream: with no opts.Timeout the process runs on.
func (c *Client) StartDetached(ctx context.Context, sb SandboxRef, req StartRequest, opts StartOptions) (uint32, error) {
	s, err := c.Start(ctx, sb, req, opts)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	for range 64 {
		ev, err := s.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, fmt.Errorf("e2b: envd start: the stream ended with no start event: %w", errdefs.ErrProviderUnavailable)
			}
			return 0, err
		}
		if ev.Start != nil {
			return ev.Start.PID, nil
		}
		if ev.End != nil {
			return 0, fmt.Errorf("e2b: envd start: the process ended before it started: %w", errdefs.ErrBadInput)
		}
	}
	return 0, fmt.Errorf("e2b: envd start: no start event: %w", errdefs.ErrProviderUnavailable)
}

// Result is how a process run to its end ended, with its output (each
// cut to the limit Run was given).
type Result struct {
	PID            uint32
	End            EndEvent
	Stdout, Stderr []byte
}

// Run starts a process and reads its stream to its end, keeping at
// most limit bytes of each output.
func (c *Client) Run(ctx context.Context, sb SandboxRef, req StartRequest, opts StartOptions, limit int) (Result, error) {
	var res Result
	s, err := c.Start(ctx, sb, req, opts)
	if err != nil {
		return res, err
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return res, fmt.Errorf("e2b: envd start: the stream ended with no end event: %w", errdefs.ErrProviderUnavailable)
			}
			return res, err
		}
		switch {
		case ev.Start != nil:
			res.PID = ev.Start.PID
		case ev.Data != nil:
			res.Stdout = appendCut(res.Stdout, ev.Data.Stdout, limit)
			res.Stderr = appendCut(res.Stderr, ev.Data.Stderr, limit)
		case ev.End != nil:
			res.End = *ev.End
			return res, nil
		}
	}
}

func appendCut(dst, b []byte, limit int) []byte {
	if room := limit - len(dst); room < len(b) {
		b = b[:max(room, 0)]
	}
	return append(dst, b...)
}

// SendSignal signals a process (process.Process/SendSignal, unary).
func (c *Client) SendSignal(ctx context.Context, sb SandboxRef, sel ProcessSelector, sig Signal) error {
	const op = "envd send signal"
	msg, err := json.Marshal(SendSignalRequest{Process: sel, Signal: sig})
	if err != nil {
		return fmt.Errorf("e2b: %s: %w", op, err)
	}
	req, err := c.envdRequest(ctx, sb, http.MethodPost, "/process.Process/SendSignal", nil, bytes.NewReader(msg))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(ctx, op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c.connectError(op, resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return nil
}

// EntryInfo is envd.yaml's EntryInfo.
type EntryInfo struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Upload writes r to path in the sandbox as user, creating its parent
// directories and replacing what was there (envd's POST /files, an
// application/octet-stream body). envd makes it with its own mode.
func (c *Client) Upload(ctx context.Context, sb SandboxRef, path, user string, r io.Reader) ([]EntryInfo, error) {
	const op = "envd upload"
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("e2b: %s: path %q is not absolute: %w", op, path, errdefs.ErrBadInput)
	}
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	req, err := c.envdRequest(ctx, sb, http.MethodPost, "/files", q, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.statusError(op, resp)
	}
	var entries []EntryInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(&entries); err != nil {
		return nil, c.transportError(ctx, op, err)
	}
	return entries, nil
}

// connectErr is the Connect protocol's error JSON.
type connectErr struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// connectError reads an envd (or proxy) error answer: Connect's error
// JSON, or E2B's proxy's own (a 502 for a sandbox not running).
func (c *Client) connectError(op string, resp *http.Response) error {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || resp.StatusCode == http.StatusBadGateway {
		return c.statusError(op, resp)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var ce connectErr
	if json.Unmarshal(body, &ce) != nil || ce.Code == "" {
		return c.statusError(op, &http.Response{StatusCode: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body))})
	}
	e := c.connectCodeError(op, &ce).(*Error)
	e.Status = resp.StatusCode
	if errors.Is(e, errdefs.ErrProviderUnavailable) {
		e.RetryAfter = svcerr.RetryAfter(resp.Header, time.Now())
	}
	return e
}

// connectCodeError classifies a Connect error code.
func (c *Client) connectCodeError(op string, ce *connectErr) error {
	e := &Error{Service: "e2b", Op: op, Message: c.scrub(oneLine(ce.Code + ": " + ce.Message))}
	switch ce.Code {
	case "not_found":
		e.Kind = errdefs.ErrNotFound
	case "unauthenticated", "permission_denied":
		e.Kind = errdefs.ErrProviderAuth
	case "resource_exhausted":
		e.Kind = errdefs.ErrQuota
	case "unavailable", "deadline_exceeded", "aborted", "internal", "unknown", "canceled":
		e.Kind = errdefs.ErrProviderUnavailable
	case "unimplemented":
		e.Kind = errdefs.ErrUnsupported
	default:
		e.Kind = errdefs.ErrBadInput
	}
	return e
}
