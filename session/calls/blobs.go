package calls

import (
	"context"
	"fmt"
	"strings"

	"gocloud.dev/gcerrors"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"
	"github.com/berth-dev/berth/transfer"
)

// OwnedPrefixes are the parts of the output blob store whose objects
// workflows may copy and delete by prefix: the coding agent's
// conversations and what it streams. Nothing else (commands' outputs,
// snapshots' chunks) is theirs to touch.
var OwnedPrefixes = []string{"conversations/", transfer.Outputs + "agent/"}

// checkOwned refuses a key or a prefix outside OwnedPrefixes, or one
// that names one of them whole or climbs out of it.
func checkOwned(key string) error {
	for _, p := range OwnedPrefixes {
		rest, ok := strings.CutPrefix(key, p)
		if !ok {
			continue
		}
		for _, el := range strings.Split(strings.TrimSuffix(rest, "/"), "/") {
			if el == "" || el == "." || el == ".." || strings.ContainsAny(el, "\\\x00") {
				return fmt.Errorf("%w: blob key %q: an empty, . or .. element", errdefs.ErrBadInput, key)
			}
		}
		return nil
	}
	return fmt.Errorf("%w: blob key %q is not under %s", errdefs.ErrBadInput, key, strings.Join(OwnedPrefixes, " or "))
}

// BlobCopy copies one object of the output store to another key.
type BlobCopy struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// CopyBlobs copies objects of the output store, each within
// OwnedPrefixes; copying again writes the same bytes.
func (a *Activities) CopyBlobs(ctx context.Context, copies []BlobCopy) error {
	for _, c := range copies {
		if err := checkOwned(c.From); err != nil {
			return temporalerr.To(err)
		}
		if err := checkOwned(c.To); err != nil {
			return temporalerr.To(err)
		}
	}
	for _, c := range copies {
		err := a.Outputs.Copy(ctx, c.To, c.From, nil)
		if gcerrors.Code(err) == gcerrors.NotFound {
			return temporalerr.To(fmt.Errorf("%w: copy blob %s: it does not exist", errdefs.ErrNotFound, c.From))
		}
		if err != nil {
			return fmt.Errorf("copy blob %s to %s: %w", c.From, c.To, err) // retried
		}
	}
	return nil
}

// DeleteBlobs deletes every object of the output store under prefix,
// which must end with a slash and lie within OwnedPrefixes; nothing
// there is not an error.
func (a *Activities) DeleteBlobs(ctx context.Context, prefix string) error {
	if !strings.HasSuffix(prefix, "/") {
		return temporalerr.To(fmt.Errorf("%w: blob prefix %q does not end with /", errdefs.ErrBadInput, prefix))
	}
	if err := checkOwned(prefix); err != nil {
		return temporalerr.To(err)
	}
	return activities.DeletePrefix(ctx, a.Outputs, prefix)
}
