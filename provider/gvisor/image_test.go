package gvisor

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/image/imagetest"
)

// TestImage runs a gVisor sandbox on an image's root filesystem (an OCI
// layout: no Docker engine needed): what only the image has is there,
// owned as the image says, and the root is read-only.
func TestImage(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	if !p.Capabilities().Image {
		t.Error("Capabilities().Image is false")
	}
	layout := t.TempDir()
	imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.RootFS(t)...))
	sb := create(t, p, provider.Spec{Image: "oci:" + layout + ":v1"})
	out := sh(t, sb, "cat "+imagetest.Marker+"; stat -c '%u' /etc/berth-image; touch /etc/x 2>/dev/null || echo read-only")
	if want := imagetest.MarkerData + "0\nread-only\n"; out != want {
		t.Errorf("in a sandbox of the image: %q, want %q", out, want)
	}
	if _, err := p.Create(t.Context(), provider.Spec{Image: "oci:" + layout + ":v1", RootFS: "/"}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("an image and a root filesystem: %v, want bad input", err)
	}
	if _, err := p.Create(t.Context(), provider.Spec{Image: "oci:" + t.TempDir() + ":nope"}); !errors.Is(err, errdefs.ErrBadInput) || !strings.Contains(err.Error(), "index.json") {
		t.Errorf("a missing image: %v", err)
	}
}
