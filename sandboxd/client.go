package sandboxd

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// Client talks to one daemon. It is safe for concurrent use; each
// operation in flight holds its own connection.
type Client struct {
	http   *http.Client
	base   string      // the URL that routes are added to
	header http.Header // sent with every request
}

// NewClient returns a client that reaches its daemon through dial.
func NewClient(dial func(ctx context.Context) (net.Conn, error)) *Client {
	return &Client{base: "http://sandboxd", http: &http.Client{Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}}}
}

// NewHTTPClient returns a client that reaches its daemon at the base
// URL base ("https://49999-i7x.e2b.app"), as a hosted service forwards
// a machine's port: header goes with every request (the service's
// routing and access tokens, the daemon's bearer token), and rt carries
// them, nil meaning a transport of the client's own. Connections are
// kept alive between requests, so that a command costs one round trip.
func NewHTTPClient(base string, header http.Header, rt http.RoundTripper) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: sandboxd: the daemon's URL is not an http or https URL", errdefs.ErrBadInput)
	}
	if rt == nil {
		rt = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
			DisableCompression:  true,
		}
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), header: header.Clone(), http: &http.Client{Transport: rt}}, nil
}

// UnixDialer dials a unix socket path.
func UnixDialer(socket string) func(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", socket) }
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, route string, query url.Values, body io.Reader) (*http.Response, error) {
	return c.doKeyed(ctx, method, route, query, body, "")
}

// doKeyed sends a request; one with an idempotency key (and a body that
// can be read again) is sent again by the transport when the idle
// connection it went out on turns out closed by the daemon (one
// restarted, or restored from a checkpoint) before any answer.
func (c *Client) doKeyed(ctx context.Context, method, route string, query url.Values, body io.Reader, key string) (*http.Response, error) {
	u := c.base + route
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var we wireError
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxFrame)).Decode(&we); err != nil {
			return nil, fmt.Errorf("sandboxd: %s %s: %s", method, route, resp.Status)
		}
		return nil, we.err()
	}
	return resp, nil
}

// Health asks the daemon about itself; it doubles as a liveness check.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	resp, err := c.do(ctx, http.MethodGet, routeHealth, nil, nil)
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

// Renew renews the daemon's lease: it is contact, and nothing else.
func (c *Client) Renew(ctx context.Context) error { return c.post(ctx, routeLease) }

// Pause stops every process of the sandbox but the daemon, until
// Resume; contact does not continue them.
func (c *Client) Pause(ctx context.Context) error { return c.post(ctx, routePause) }

// Resume continues what Pause stopped.
func (c *Client) Resume(ctx context.Context) error { return c.post(ctx, routeResume) }

func (c *Client) post(ctx context.Context, route string) error {
	resp, err := c.do(ctx, http.MethodPost, route, nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Exec runs or attaches to a command; see provider.Sandbox.Exec.
func (c *Client) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	if err := provider.ValidateExec(req); err != nil {
		return provider.ExecResult{}, err
	}
	hdr, err := json.Marshal(execHeader{
		ID: req.ID, Argv: req.Argv, Shell: req.Shell, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout,
		Stdin: req.Stdin != nil, TTY: req.TTY, StdoutOffset: req.StdoutOffset, StderrOffset: req.StderrOffset,
	})
	if err != nil {
		return provider.ExecResult{}, err
	}
	var body io.Reader = bytes.NewReader(append(hdr, '\n'))
	// A command with an ID runs once: sent again, it attaches to the one
	// under way. Its request may then be sent again, unless its input
	// is a stream that cannot be read twice.
	key := req.ID
	if req.Stdin != nil {
		body, key = io.MultiReader(body, req.Stdin), ""
	}
	resp, err := c.doKeyed(ctx, http.MethodPost, routeExec, nil, body, key)
	if err != nil {
		return provider.ExecResult{}, err
	}
	res, err := readExecStream(resp.Body, req.Stdout, req.Stderr)
	if req.Stdin == nil {
		// The response ends right after its last frame: reading that end
		// lets the transport keep the connection for the next request,
		// where closing the body first would drop it, and the next
		// command would pay for a new connection. A command's stdin
		// may keep its response open for a while longer (see the
		// server's stdinFeed): that connection is not waited for.
		_, _ = io.CopyN(io.Discard, resp.Body, maxTrailing)
	}
	resp.Body.Close()
	return res, err
}

// maxTrailing bounds what a client reads past the last frame of a
// response to reach its end.
const maxTrailing = 4 << 10

func readExecStream(r io.Reader, stdoutW, stderrW io.Writer) (provider.ExecResult, error) {
	out := [2]io.Writer{stdoutW, stderrW}
	for i, w := range out {
		if w == nil {
			out[i] = io.Discard
		}
	}
	var buf []byte
	for {
		typ, payload, err := readFrame(r, buf)
		buf = payload
		if err != nil {
			return provider.ExecResult{}, fmt.Errorf("sandboxd: exec stream: %w", noEOF(err))
		}
		switch typ {
		case frameStdout, frameStderr:
			w := out[stdout]
			if typ == frameStderr {
				w = out[stderr]
			}
			if _, err := w.Write(payload); err != nil {
				return provider.ExecResult{}, fmt.Errorf("sandboxd: exec: writing output: %w", err)
			}
		case frameGap:
			if len(payload) != 9 {
				return provider.ExecResult{}, fmt.Errorf("sandboxd: exec stream: bad gap frame")
			}
			_ = binary.BigEndian.Uint64(payload[1:]) // the result says Truncated
		case frameResult:
			var end execEnd
			if err := json.Unmarshal(payload, &end); err != nil {
				return provider.ExecResult{}, fmt.Errorf("sandboxd: exec result: %w", err)
			}
			if end.Error != nil {
				return end.Result, end.Error.err()
			}
			return end.Result, nil
		case frameError:
			var we wireError
			if err := json.Unmarshal(payload, &we); err != nil {
				return provider.ExecResult{}, fmt.Errorf("sandboxd: exec error: %w", err)
			}
			return provider.ExecResult{}, we.err()
		default:
			return provider.ExecResult{}, fmt.Errorf("sandboxd: exec stream: unknown frame %q", typ)
		}
	}
}

// TerminalInput sends input to a command's terminal; see
// provider.Terminal.
func (c *Client) TerminalInput(ctx context.Context, id string, data []byte) error {
	resp, err := c.do(ctx, http.MethodPost, routeTTY, url.Values{"id": {id}}, bytes.NewReader(data))
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ResizeTerminal resizes a command's terminal; see provider.Terminal.
func (c *Client) ResizeTerminal(ctx context.Context, id string, size provider.TerminalSize) error {
	q := url.Values{"id": {id}, "rows": {strconv.Itoa(int(size.Rows))}, "cols": {strconv.Itoa(int(size.Cols))}}
	resp, err := c.do(ctx, http.MethodPut, routeTTY, q, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func pathQuery(p string) url.Values { return url.Values{"path": {p}} }

// WriteFile writes one file; see provider.Sandbox.WriteFile.
func (c *Client) WriteFile(ctx context.Context, p string, r io.Reader, mode fs.FileMode) error {
	q := pathQuery(p)
	q.Set("mode", strconv.FormatUint(uint64(sanitizeMode(mode)), 8))
	resp, err := c.do(ctx, http.MethodPut, routeFile, q, r)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// WriteFiles writes several files in one archive; see
// provider.Sandbox.WriteFiles.
func (c *Client) WriteFiles(ctx context.Context, files []provider.File) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, f := range files {
		rel, err := provider.WorkspacePath(f.Path)
		if err != nil {
			return err
		}
		if rel == "." {
			return fmt.Errorf("%w: write %q: the workspace itself is not a file", errdefs.ErrBadInput, f.Path)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: int64(len(f.Data)),
			Mode: int64(sanitizeMode(f.Mode)), ModTime: now, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return c.Import(ctx, &buf)
}

// ReadFile opens a file; see provider.Sandbox.ReadFile.
func (c *Client) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, routeFile, pathQuery(p), nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ListDir lists a directory; see provider.Sandbox.ListDir.
func (c *Client) ListDir(ctx context.Context, p string) ([]provider.FileInfo, error) {
	resp, err := c.do(ctx, http.MethodGet, routeDir, pathQuery(p), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var infos []provider.FileInfo
	if err := json.NewDecoder(resp.Body).Decode(&infos); err != nil {
		return nil, fmt.Errorf("sandboxd: list %q: %w", p, err)
	}
	return infos, nil
}

// Remove removes a path; see provider.Sandbox.Remove.
func (c *Client) Remove(ctx context.Context, p string) error {
	resp, err := c.do(ctx, http.MethodDelete, routeFile, pathQuery(p), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Export streams the workspace as tar; see provider.Sandbox.Export.
func (c *Client) Export(ctx context.Context) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, routeWorkspace, nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ExportPath streams a file or directory of the workspace as tar; see
// provider.PathExporter.
func (c *Client) ExportPath(ctx context.Context, p string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, routeWorkspace, pathQuery(p), nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ExportChanged streams the workspace as tar, without the content of the
// files unchanged since since; see provider.ChangedExporter.
func (c *Client) ExportChanged(ctx context.Context, since time.Time) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, routeWorkspace, url.Values{"since": {strconv.FormatInt(since.UnixNano(), 10)}}, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Import unpacks a tar stream; see provider.Sandbox.Import.
func (c *Client) Import(ctx context.Context, r io.Reader) error {
	resp, err := c.do(ctx, http.MethodPut, routeWorkspace, nil, r)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Signal signals a running command; see provider.Signaler.
func (c *Client) Signal(ctx context.Context, commandID, sig string) error {
	body, err := json.Marshal(signalRequest{ID: commandID, Signal: sig})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, routeSignal, nil, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
