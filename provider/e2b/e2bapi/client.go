// Package e2bapi is a small client of E2B (e2b.dev): its control API
// (the REST API of e2b-dev/infra's spec/openapi.yml: sandboxes made,
// found, listed, paused, resumed, ended, their timeouts) and envd, the
// daemon inside each sandbox (the Connect RPC process service of
// packages/envd/spec/process/process.proto, in the Connect protocol's
// JSON form, and the /files upload of packages/envd/spec/envd.yaml).
//
// Its types mirror the spec's JSON exactly (camelCase with ID suffixes:
// templateID, sandboxID, envVars), and its errors carry berth's kinds
// (package errdefs) in one line that never holds the API key.
//
// One trap of envd shapes Start: envd gives a process the lifetime of
// the request's Connect-Timeout-Ms header, and kills it when that
// passes. Start sends the header only when asked to (StartOptions.Timeout),
// so a daemon started without it outlives its request.
package e2bapi

import (
	"bytes"
	"context"
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
)

// DefaultAPIURL is E2B's control API.
const DefaultAPIURL = "https://api.e2b.app"

// DefaultDomain is the domain of E2B's sandboxes' ports.
const DefaultDomain = "e2b.app"

// EnvdPort is the port envd listens on in every sandbox
// (packages/shared/pkg/consts/envd.go).
const EnvdPort = 49983

// The headers E2B's proxy routes and admits by.
const (
	// HeaderSandboxID and HeaderSandboxPort route a request sent to the
	// stable sandbox host (packages/shared/pkg/proxy/host.go).
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
	// HeaderTrafficToken admits a request to a sandbox whose public
	// traffic is closed (packages/orchestrator/pkg/proxy/proxy.go).
	HeaderTrafficToken = "E2b-Traffic-Access-Token"
	// HeaderAccessToken admits a request to envd of a sandbox created
	// secure (envd.yaml's AccessTokenAuth).
	HeaderAccessToken = "X-Access-Token"
)

// Options configure a Client.
type Options struct {
	// APIURL is the control API's base URL; empty means DefaultAPIURL.
	APIURL string
	// Domain is the sandboxes' domain: a port is reached at
	// https://{port}-{sandboxID}.{domain}. Empty means the domain each
	// sandbox reports, else DefaultDomain.
	Domain string
	// SandboxURL, when set, is one stable base URL for every sandbox's
	// ports, the request routed by the E2b-Sandbox-Id and
	// E2b-Sandbox-Port headers (E2B's shared sandbox host).
	SandboxURL string
	// APIKey is the team's key, sent as X-API-Key.
	APIKey string
	// HTTPClient carries every request; nil means a client of its own.
	// Its Timeout must be zero: envd's streams last as long as their
	// processes are read.
	HTTPClient *http.Client
}

// Client calls E2B. It is safe for concurrent use.
type Client struct {
	apiURL     *url.URL
	domain     string
	sandboxURL *url.URL
	key        string
	http       *http.Client
}

// New returns a client. A missing key is refused with
// errdefs.ErrProviderAuth.
func New(o Options) (*Client, error) {
	if o.APIKey == "" {
		return nil, fmt.Errorf("e2b: no API key: %w", errdefs.ErrProviderAuth)
	}
	if strings.ContainsAny(o.APIKey, "\r\n") {
		return nil, fmt.Errorf("e2b: the API key holds a line break: %w", errdefs.ErrProviderAuth)
	}
	c := &Client{domain: o.Domain, key: o.APIKey, http: o.HTTPClient}
	if c.http == nil {
		c.http = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	api := o.APIURL
	if api == "" {
		api = DefaultAPIURL
	}
	var err error
	if c.apiURL, err = parseBase(api); err != nil {
		return nil, fmt.Errorf("e2b: api url: %w", err)
	}
	if o.SandboxURL != "" {
		if c.sandboxURL, err = parseBase(o.SandboxURL); err != nil {
			return nil, fmt.Errorf("e2b: sandbox url: %w", err)
		}
	}
	return c, nil
}

func parseBase(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a URL", errdefs.ErrBadInput, s)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return nil, fmt.Errorf("%w: %q is not an http(s) base URL", errdefs.ErrBadInput, s)
	}
	return u, nil
}

// NewSandbox is the spec's NewSandbox: what POST /sandboxes makes.
type NewSandbox struct {
	TemplateID string `json:"templateID"`
	// Timeout is the sandbox's time to live, in seconds (E2B's default
	// 15; its maximum the team's plan's, 1 or 24 hours).
	Timeout   *int32 `json:"timeout,omitempty"`
	AutoPause *bool  `json:"autoPause,omitempty"`
	// Secure makes envd ask for the sandbox's envdAccessToken.
	Secure              *bool             `json:"secure,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Network             *NetworkConfig    `json:"network,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
}

// NetworkConfig is the spec's SandboxNetworkConfig, the part berth sets:
// AllowOut lists CIDRs, addresses and names ("example.com",
// "*.example.com") the sandbox may reach, whatever DenyOut (CIDRs)
// or allow_internet_access false deny.
type NetworkConfig struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

// NetworkUpdate is the spec's SandboxNetworkUpdateConfig: it replaces a
// running sandbox's egress rules, a field left out clearing its own.
type NetworkUpdate struct {
	AllowOut            []string `json:"allowOut,omitempty"`
	DenyOut             []string `json:"denyOut,omitempty"`
	AllowInternetAccess *bool    `json:"allow_internet_access,omitempty"`
}

// Sandbox is the spec's Sandbox: what create and connect answer.
type Sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken,omitempty"`
	Domain             *string `json:"domain,omitempty"`
}

// SandboxState is the spec's SandboxState.
type SandboxState string

const (
	StateRunning SandboxState = "running"
	StatePaused  SandboxState = "paused"
)

// SandboxDetail is the spec's SandboxDetail (GET /sandboxes/{id}); its
// fields beyond ListedSandbox's are those berth reads.
type SandboxDetail struct {
	ListedSandbox
	EnvdAccessToken string  `json:"envdAccessToken,omitempty"`
	Domain          *string `json:"domain,omitempty"`
	// AllowInternetAccess is null when it was not set; Network is the
	// sandbox's egress rules.
	AllowInternetAccess *bool          `json:"allowInternetAccess,omitempty"`
	Network             *NetworkConfig `json:"network,omitempty"`
}

// ListedSandbox is the spec's ListedSandbox (GET /v2/sandboxes).
type ListedSandbox struct {
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int32             `json:"cpuCount"`
	MemoryMB    int32             `json:"memoryMB"`
	DiskSizeMB  int32             `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	State       SandboxState      `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

// Bounds on what E2B's answers may hold.
const (
	maxJSONBody = 4 << 20
	// listPageLimit is the spec's largest page.
	listPageLimit = 100
	// maxListPages bounds a listing's pages (100 sandboxes each).
	maxListPages = 100
)

// CreateSandbox makes a sandbox (POST /sandboxes).
func (c *Client) CreateSandbox(ctx context.Context, req NewSandbox) (Sandbox, error) {
	var sb Sandbox
	_, err := c.do(ctx, "create sandbox", http.MethodPost, "/sandboxes", nil, req, &sb, http.StatusCreated)
	if err == nil && sb.SandboxID == "" {
		err = fmt.Errorf("e2b: create sandbox: the answer names no sandbox: %w", errdefs.ErrProviderUnavailable)
	}
	return sb, err
}

// GetSandbox describes a running or paused sandbox (GET /sandboxes/{id}).
func (c *Client) GetSandbox(ctx context.Context, id string) (SandboxDetail, error) {
	var sb SandboxDetail
	if err := checkID(id); err != nil {
		return sb, err
	}
	_, err := c.do(ctx, "get sandbox", http.MethodGet, "/sandboxes/"+id, nil, nil, &sb, http.StatusOK)
	return sb, err
}

// ListOptions filter ListSandboxes.
type ListOptions struct {
	// Metadata keeps the sandboxes whose metadata holds all of it.
	Metadata map[string]string
	// States keeps the sandboxes in one of them; empty means E2B's
	// default (running ones).
	States []SandboxState
}

// ListSandboxes lists the team's sandboxes (GET /v2/sandboxes), every
// page of them.
func (c *Client) ListSandboxes(ctx context.Context, o ListOptions) ([]ListedSandbox, error) {
	q := url.Values{}
	if len(o.Metadata) > 0 {
		md := url.Values{}
		for k, v := range o.Metadata {
			md.Set(k, v)
		}
		q.Set("metadata", md.Encode())
	}
	if len(o.States) > 0 {
		s := make([]string, len(o.States))
		for i, st := range o.States {
			s[i] = string(st)
		}
		q.Set("state", strings.Join(s, ","))
	}
	q.Set("limit", strconv.Itoa(listPageLimit))
	var all []ListedSandbox
	for range maxListPages {
		var page []ListedSandbox
		h, err := c.do(ctx, "list sandboxes", http.MethodGet, "/v2/sandboxes", q, nil, &page, http.StatusOK)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		next := h.Get("X-Next-Token")
		if next == "" || len(page) == 0 {
			return all, nil
		}
		q.Set("nextToken", next)
	}
	return nil, fmt.Errorf("e2b: list sandboxes: more than %d pages: %w", maxListPages, errdefs.ErrProviderUnavailable)
}

// Check proves that E2B answers and accepts the key, in the cheapest
// call its API has: one page of one sandbox (GET /v2/sandboxes?limit=1).
// A key refused is errdefs.ErrProviderAuth, E2B out of reach or failing
// errdefs.ErrProviderUnavailable, as every call's.
func (c *Client) Check(ctx context.Context) error {
	var page []ListedSandbox
	_, err := c.do(ctx, "check (list sandboxes)", http.MethodGet, "/v2/sandboxes", url.Values{"limit": {"1"}}, nil, &page, http.StatusOK)
	return err
}

// KillSandbox ends a sandbox (DELETE /sandboxes/{id}); one that is not
// there is errdefs.ErrNotFound.
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := c.do(ctx, "kill sandbox", http.MethodDelete, "/sandboxes/"+id, nil, nil, nil, http.StatusNoContent)
	return err
}

// PauseSandbox pauses a sandbox with its memory (POST /sandboxes/{id}/pause).
func (c *Client) PauseSandbox(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := c.do(ctx, "pause sandbox", http.MethodPost, "/sandboxes/"+id+"/pause", nil, nil, nil, http.StatusNoContent)
	return err
}

// ConnectSandbox returns a sandbox, resuming it when paused, and keeps it
// at least timeout from now (POST /sandboxes/{id}/connect). resumed says
// it was paused (E2B's 201).
func (c *Client) ConnectSandbox(ctx context.Context, id string, timeout time.Duration) (sb Sandbox, resumed bool, err error) {
	if err := checkID(id); err != nil {
		return sb, false, err
	}
	body := struct {
		Timeout int32 `json:"timeout"`
	}{Seconds(timeout)}
	status, err := c.doStatus(ctx, "connect sandbox", http.MethodPost, "/sandboxes/"+id+"/connect", body, &sb, http.StatusOK, http.StatusCreated)
	return sb, status == http.StatusCreated, err
}

// SetTimeout makes E2B end the sandbox timeout from now, no sooner nor
// later (POST /sandboxes/{id}/timeout).
func (c *Client) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	if err := checkID(id); err != nil {
		return err
	}
	body := struct {
		Timeout int32 `json:"timeout"`
	}{Seconds(timeout)}
	_, err := c.do(ctx, "set sandbox timeout", http.MethodPost, "/sandboxes/"+id+"/timeout", nil, body, nil, http.StatusNoContent)
	return err
}

// UpdateNetwork replaces a running sandbox's egress rules
// (PUT /sandboxes/{id}/network).
func (c *Client) UpdateNetwork(ctx context.Context, id string, u NetworkUpdate) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := c.do(ctx, "update sandbox network", http.MethodPut, "/sandboxes/"+id+"/network", nil, u, nil, http.StatusNoContent)
	return err
}

// Seconds is d in whole seconds for E2B's timeouts, rounded up, at least 1.
func Seconds(d time.Duration) int32 {
	s := (d + time.Second - 1) / time.Second
	return int32(min(max(s, 1), 1<<31-1))
}

// checkID refuses an id that is not one path segment of plain characters.
func checkID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("e2b: sandbox id of %d bytes: %w", len(id), errdefs.ErrBadInput)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("e2b: sandbox id %q: %w", id, errdefs.ErrBadInput)
		}
	}
	return nil
}

func (c *Client) do(ctx context.Context, op, method, path string, q url.Values, in, out any, want int) (http.Header, error) {
	h, _, err := c.call(ctx, op, method, path, q, in, out, want)
	return h, err
}

func (c *Client) doStatus(ctx context.Context, op, method, path string, in, out any, want ...int) (int, error) {
	_, status, err := c.call(ctx, op, method, path, nil, in, out, want...)
	return status, err
}

// call sends one control API request and decodes its answer into out.
func (c *Client) call(ctx context.Context, op, method, path string, q url.Values, in, out any, want ...int) (http.Header, int, error) {
	u := *c.apiURL
	u.Path += path
	u.RawQuery = q.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, 0, fmt.Errorf("e2b: %s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, 0, fmt.Errorf("e2b: %s: %w", op, errdefs.ErrBadInput)
	}
	req.Header.Set("X-API-Key", c.key)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, c.transportError(ctx, op, err)
	}
	defer resp.Body.Close()
	ok := false
	for _, w := range want {
		ok = ok || resp.StatusCode == w
	}
	if !ok {
		return resp.Header, resp.StatusCode, c.statusError(op, resp)
	}
	if out != nil {
		dec := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody))
		if err := dec.Decode(out); err != nil {
			if ctx.Err() == nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				return nil, 0, fmt.Errorf("e2b: %s: unreadable answer: %s: %w", op, oneLine(err.Error()), errdefs.ErrProviderUnavailable)
			}
			return nil, 0, c.transportError(ctx, op, err)
		}
	}
	return resp.Header, resp.StatusCode, nil
}
