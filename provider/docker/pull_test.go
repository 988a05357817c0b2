package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/provider"
)

// registry serves one image read-only over the registry API (v2), the
// least of it the engine needs to pull: the machine has no registry.
type registry struct {
	manifest []byte
	blobs    map[string][]byte // by digest
}

// newRegistry serves the image the engine has as ref, as saved by docker
// save: its config and its layers, uncompressed, which the engine takes
// whatever a manifest says of their compression.
func newRegistry(t *testing.T, cli *client.Client, ref string) *httptest.Server {
	t.Helper()
	rc, err := cli.ImageSave(t.Context(), []string{ref})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	var saved []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(files["manifest.json"], &saved); err != nil || len(saved) != 1 {
		t.Fatalf("docker save's manifest.json: %v", err)
	}
	r := &registry{blobs: map[string][]byte{}}
	add := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		r.blobs[d] = b
		return d, len(b)
	}
	type desc struct {
		MediaType string `json:"mediaType"`
		Size      int    `json:"size"`
		Digest    string `json:"digest"`
	}
	m := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        desc   `json:"config"`
		Layers        []desc `json:"layers"`
	}{SchemaVersion: 2, MediaType: "application/vnd.docker.distribution.manifest.v2+json"}
	d, n := add(files[saved[0].Config])
	m.Config = desc{"application/vnd.docker.container.image.v1+json", n, d}
	for _, l := range saved[0].Layers {
		d, n := add(files[l])
		m.Layers = append(m.Layers, desc{"application/vnd.docker.image.rootfs.diff.tar.gzip", n, d})
	}
	r.manifest, _ = json.Marshal(m)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

func (r *registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	var body []byte
	switch p := req.URL.Path; {
	case p == "/v2/":
		body = []byte("{}")
	case strings.Contains(p, "/manifests/"):
		sum := sha256.Sum256(r.manifest)
		w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
		w.Header().Set("Docker-Content-Digest", "sha256:"+hex.EncodeToString(sum[:]))
		body = r.manifest
	case strings.Contains(p, "/blobs/"):
		b, ok := r.blobs[p[strings.LastIndex(p, "/")+1:]]
		if !ok {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		body = b
	default:
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if req.Method != http.MethodHead {
		w.Write(body)
	}
}

// TestPull: an image not on the host is pulled from a registry, with its
// progress in the provider's log, and the sandbox runs it.
func TestPull(t *testing.T) {
	var log logBuffer
	p := newTestProvider(t, Config{Pool: -1, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	srv := newRegistry(t, p.docker, testImage)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/berth/pulled:1"
	t.Cleanup(func() {
		p.docker.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true})
	})
	sb := create(t, p, provider.Spec{ID: "pulled", Image: ref})
	if out := sh(t, sb, "echo pulled"); out != "pulled\n" {
		t.Errorf("a sandbox of the pulled image said %q", out)
	}
	if !strings.Contains(log.String(), "pulling image") || !strings.Contains(log.String(), "status=") {
		t.Errorf("the provider's log does not show the pull:\n%s", log.String())
	}
}

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
