package modal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote"
)

// maxImageID bounds an image id Modal gives, kept in a tag and in
// workflow state.
const maxImageID = 128

// createImage is the image Create makes req's sandbox from: the
// snapshot it names, or its registry image (the configured one unless
// it names another).
func (a *API) createImage(ctx context.Context, app *modal.App, req remote.CreateRequest) (*modal.Image, error) {
	if req.Snapshot == "" {
		ref := a.cfg.Image
		if req.Image != "" {
			ref = req.Image
		}
		return a.imageOf(ctx, app, ref)
	}
	if !validImageID(req.Snapshot) {
		return nil, fmt.Errorf("%w: modal: %q is not an image id", errdefs.ErrBadInput, oneLineValue(req.Snapshot))
	}
	// An expired or deleted snapshot is NotFound here, or at the
	// create that follows.
	img, err := a.c.Images.FromID(ctx, req.Snapshot, nil)
	if err != nil {
		return nil, a.classify("get snapshot", err)
	}
	return img, nil
}

// Snapshot implements remote.Snapshotter with Modal's filesystem
// snapshot, bounded by Config.SnapshotTimeout and kept for
// Config.SnapshotTTL: never the SDK's defaults. The image's id goes into
// a tag of the sandbox with key, so that a retry after a lost answer
// returns it rather than taking another (a snapshot of another key, an
// earlier hibernation's that did not end the sandbox, is stale); a
// worker that dies between the snapshot and the tag leaves an image
// that Modal drops at its TTL.
func (a *API) Snapshot(ctx context.Context, m remote.Machine, key string) (provider.Hibernation, error) {
	if err := provider.ValidateID(key); err != nil {
		return provider.Hibernation{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.SnapshotTimeout+callTimeout)
	defer cancel()
	sb, err := a.box(ctx, m)
	if err != nil {
		return provider.Hibernation{}, err
	}
	tags, err := sb.GetTags(ctx, nil)
	if err != nil {
		return provider.Hibernation{}, a.classify("get tags", err)
	}
	if k, h, ok := parseSnapshotTag(tags[tagSnapshot]); ok && k == key && time.Until(h.ExpiresAt) > 0 {
		return h, nil
	}
	// The TTL runs from the image's making, after this.
	start := time.Now()
	img, err := sb.SnapshotFilesystem(ctx, &modal.SandboxSnapshotFilesystemParams{
		Timeout: a.cfg.SnapshotTimeout, TTL: a.cfg.SnapshotTTL,
	})
	var te modal.TimeoutError
	switch {
	case errors.As(err, &te), err != nil && time.Since(start) >= a.cfg.SnapshotTimeout && ctx.Err() == nil:
		return provider.Hibernation{}, &Error{Service: Name, Op: "snapshot filesystem", Kind: errdefs.ErrTimeout,
			Message: fmt.Sprintf("not done within snapshot-timeout %v", a.cfg.SnapshotTimeout)}
	case err != nil:
		return provider.Hibernation{}, a.classify("snapshot filesystem", err)
	case !validImageID(img.ImageID):
		return provider.Hibernation{}, fmt.Errorf("%w: modal: snapshot filesystem: an image id of %d bytes", errdefs.ErrProviderUnavailable, len(img.ImageID))
	}
	h := provider.Hibernation{Ref: img.ImageID, ExpiresAt: start.Add(a.cfg.SnapshotTTL).Truncate(time.Millisecond)}
	tags[tagSnapshot] = key + " " + img.ImageID + " " + strconv.FormatInt(h.ExpiresAt.UnixMilli(), 10)
	if err := sb.SetTags(ctx, tags, nil); err != nil {
		// Only a retry needs it; this call's answer has the image.
		a.log.Warn("modal: tag a sandbox with its snapshot", "sandbox", m.ID, "image", img.ImageID, "error", a.classify("set tags", err))
	}
	return h, nil
}

// DeleteSnapshot implements remote.Snapshotter.
func (a *API) DeleteSnapshot(ctx context.Context, ref string) error {
	if !validImageID(ref) {
		return fmt.Errorf("%w: modal: %q is not an image id", errdefs.ErrBadInput, oneLineValue(ref))
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := a.classify("delete image", a.c.Images.Delete(ctx, ref, nil))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}

// parseSnapshotTag reads tagSnapshot's value: its key and snapshot.
func parseSnapshotTag(v string) (string, provider.Hibernation, bool) {
	f := strings.Split(v, " ")
	if len(f) != 3 || provider.ValidateID(f[0]) != nil || !validImageID(f[1]) {
		return "", provider.Hibernation{}, false
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || n <= 0 {
		return "", provider.Hibernation{}, false
	}
	return f[0], provider.Hibernation{Ref: f[1], ExpiresAt: time.UnixMilli(n)}, true
}

// validImageID allows Modal's image ids ("im-" and letters and digits).
func validImageID(id string) bool {
	rest, ok := strings.CutPrefix(id, "im-")
	if !ok || rest == "" || len(id) > maxImageID {
		return false
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
