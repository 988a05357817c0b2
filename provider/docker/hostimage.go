package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// The default image: when the configuration names no image, sandboxes
// whose spec names none run on an image the provider makes itself, in
// the background from its start, from the host's files (see hostroot.go),
// through the engine's image import: no registry, no docker command.
// It is tagged berth-host:1-VERSION, VERSION being berth's, so that a new
// berth makes a new one; one that exists already is used as it is.

// LabelHostImage marks the images the provider makes from the host's
// files.
const LabelHostImage = "dev.berth.host-image"

// hostImageFormat is the version of what the default image holds: a
// change to it makes a new image even for the same berth.
const hostImageFormat = "1"

// modulePath is berth's module, whose version names the default image.
const modulePath = "github.com/berth-dev/berth"

// DefaultHostImage is the default image's reference: berth-host:1-VERSION,
// VERSION being the version of berth the binary links (its module's,
// from the build information; "dev" when it has none).
func DefaultHostImage() string {
	v := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok {
		m := &bi.Main
		if m.Path != modulePath {
			m = nil
			for _, d := range bi.Deps {
				if d.Path == modulePath {
					m = d
					if d.Replace != nil {
						m = d.Replace
					}
				}
			}
		}
		if m != nil && m.Version != "" && m.Version != "(devel)" {
			v = m.Version
		}
	}
	return "berth-host:" + hostImageFormat + "-" + tagSafe(v)
}

// tagSafe makes s a valid image tag's text: [A-Za-z0-9_.-], at most 100
// characters (a build's +dirty becomes -dirty).
func tagSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b[:min(len(b), 100)])
}

// hostImageWait is how long a creation waits for the default image
// being made before it fails, to be retried.
const hostImageWait = 20 * time.Second

// hostImageTimeout bounds one attempt at making the default image.
const hostImageTimeout = 10 * time.Minute

// hostImage makes the default image once, in the background, and tells
// creations when it is there.
type hostImage struct {
	ref    string
	root   string // the host's files: "/" but in tests
	bounds rootBounds
	wait   time.Duration
	docker *client.Client
	log    *slog.Logger

	ctx    context.Context // canceled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	ready   bool
	running chan struct{} // closed when the attempt under way ends; nil when none is
	err     error         // of the last attempt that failed
}

func newHostImage(cli *client.Client, ref, root string, bounds rootBounds, wait time.Duration, log *slog.Logger) *hostImage {
	ctx, cancel := context.WithCancel(context.Background())
	return &hostImage{ref: ref, root: root, bounds: bounds, wait: wait, docker: cli, log: log, ctx: ctx, cancel: cancel}
}

// start begins an attempt at making the image, unless it is there or an
// attempt is under way, and returns when that attempt ends.
func (h *hostImage) start() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ready {
		done := make(chan struct{})
		close(done)
		return done
	}
	if h.running != nil {
		return h.running
	}
	done := make(chan struct{})
	h.running = done
	h.wg.Go(func() {
		err := h.make(h.ctx)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.running = nil
		h.ready, h.err = err == nil, err
		close(done)
	})
	return done
}

// ensure returns once the image is there: at once when it is, after the
// attempt under way (or a new one, when the last failed) otherwise. It
// fails, for the caller to retry later, when that takes longer than the
// wait, or when the attempt fails.
func (h *hostImage) ensure(ctx context.Context) error {
	done := h.start()
	t := time.NewTimer(h.wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return fmt.Errorf("the default image %s is still being made from the host's files: try again in a moment", h.ref)
	case <-ctx.Done():
		return ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ready {
		return nil
	}
	return fmt.Errorf("the default image %s could not be made from the host's files: %v", h.ref, h.err)
}

// report is one line on the image when it is not there: being made, or
// why it could not be.
func (h *hostImage) report() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.ready:
		return ""
	case h.running != nil:
		return "default image " + h.ref + ": being made from the host's files"
	case h.err != nil:
		return "default image " + h.ref + ": not made: " + h.err.Error()
	}
	return ""
}

func (h *hostImage) close() {
	h.cancel()
	h.wg.Wait()
}

// make imports the image from the host's files, unless the engine has
// it.
func (h *hostImage) make(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, hostImageTimeout)
	defer cancel()
	_, err := h.docker.ImageInspect(ctx, h.ref)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image: %s", oneLine(err))
	}
	start := time.Now()
	h.log.Info("making the default image from the host's files", "image", h.ref)
	pr, pw := io.Pipe()
	counted := &countingWriter{w: pw}
	written := make(chan error, 1)
	go func() {
		err := writeHostRoot(ctx, counted, h.root, h.bounds)
		pw.CloseWithError(err)
		written <- err
	}()
	ierr := h.importStream(ctx, pr)
	// The engine may stop reading at the archive's end, before its
	// padding: the writer is then done.
	pr.CloseWithError(errImportEnded)
	werr := <-written
	if errors.Is(werr, errImportEnded) && ierr == nil {
		werr = nil
	}
	if werr != nil || ierr != nil {
		err := werr
		if err == nil {
			err = ierr
		}
		// What the engine made of a stream that broke off must not be used.
		if _, rerr := h.docker.ImageRemove(context.WithoutCancel(ctx), h.ref, client.ImageRemoveOptions{}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
			h.log.Warn("remove a default image made in part", "image", h.ref, "err", oneLine(rerr))
		}
		return h.failed(err)
	}
	h.log.Info("made the default image", "image", h.ref, "bytes", counted.n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

var errImportEnded = errors.New("the import ended")

// importStream imports the root's tar stream as the image.
func (h *hostImage) importStream(ctx context.Context, r io.Reader) error {
	resp, err := h.docker.ImageImport(ctx, client.ImageImportSource{Source: r, SourceName: "-"}, h.ref, client.ImageImportOptions{
		Message: "berth's default image, made from the host's files",
		Changes: []string{
			"ENV PATH=/usr/local/bin:/usr/bin:/bin",
			"ENV LANG=C.UTF-8",
			"LABEL " + LabelHostImage + "=" + hostImageFormat,
		},
	})
	if err != nil {
		return err
	}
	defer resp.Close()
	dec := json.NewDecoder(io.LimitReader(resp, 1<<20))
	for {
		var msg jsonstream.Message
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		if msg.Error != nil {
			return errors.New(msg.Error.Message)
		}
	}
	_, err = h.docker.ImageInspect(ctx, h.ref)
	return err
}

// failed says why an attempt failed, in one line, and logs it.
func (h *hostImage) failed(err error) error {
	err = errors.New(oneLine(err))
	if h.ctx.Err() == nil {
		h.log.Warn("the default image could not be made", "image", h.ref, "err", err)
	}
	return err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// is says whether ref names the image h makes.
func (h *hostImage) is(ref string) bool {
	return h != nil && ref == h.ref
}
