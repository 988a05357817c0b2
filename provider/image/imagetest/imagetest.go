// Package imagetest builds container images for tests, with no
// registry: layer tars made from the host's own binaries, OCI image
// layouts written from them, and Docker images imported from them into
// the host's engine.
package imagetest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/moby/moby/client"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Marker is a file only the test image has, holding MarkerData.
const (
	Marker     = "/etc/berth-image"
	MarkerData = "only in the image\n"
)

// Entry is an entry of a layer. Type zero means a regular file; Mode
// zero means 0644 for files, 0755 for directories.
type Entry struct {
	Name     string
	Type     byte
	Data     string
	Link     string
	Mode     int64
	UID, GID int
}

// Dir and File are shorthands.
func Dir(name string, uid, gid int) Entry {
	return Entry{Name: name, Type: tar.TypeDir, UID: uid, GID: gid}
}

// File is a regular file owned by root.
func File(name, data string) Entry { return Entry{Name: name, Data: data} }

// Layer writes entries as a layer tar.
func Layer(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Link, Mode: e.Mode, Uid: e.UID, Gid: e.GID,
			ModTime: time.Unix(1.7e9, 0), Format: tar.FormatPAX}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
			if hdr.Typeflag == tar.TypeDir {
				hdr.Mode = 0o755
			}
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Programs are the host's programs the test root filesystem has, with
// the libraries they need.
var Programs = []string{"sh", "cat", "stat", "id", "ls"}

// RootFS is a small root filesystem made of the host's Programs (the
// host must have merged /usr, as Debian has): /bin/sh and the rest, the
// Marker, an /etc/passwd naming root and the sandbox user (1000), a
// directory owned by 1000, a set-user-id file, and a file owned by a
// uid no sandbox maps (70000).
func RootFS(t testing.TB) []Entry {
	t.Helper()
	files := map[string]bool{}
	for _, p := range Programs {
		exe, err := exec.LookPath(p)
		if err != nil {
			t.Fatal(err)
		}
		files[exe] = true
		out, err := exec.Command("ldd", exe).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", exe, err)
		}
		for line := range strings.Lines(string(out)) {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					files[f] = true
				}
			}
		}
	}
	entries := []Entry{
		Dir("usr/", 0, 0), Dir("usr/bin/", 0, 0), Dir("usr/lib/", 0, 0), Dir("usr/lib64/", 0, 0), Dir("etc/", 0, 0),
		{Name: "bin", Type: tar.TypeSymlink, Link: "usr/bin"},
		{Name: "lib", Type: tar.TypeSymlink, Link: "usr/lib"},
		{Name: "lib64", Type: tar.TypeSymlink, Link: "usr/lib64"},
	}
	made := map[string]bool{"usr": true, "usr/bin": true, "usr/lib": true, "usr/lib64": true, "etc": true}
	add := func(host string) {
		real, err := filepath.EvalSymlinks(host)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(real, "/")
		var dirs []string
		for d := path.Dir(name); d != "." && !made[d]; d = path.Dir(d) {
			dirs = append(dirs, d)
			made[d] = true
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			entries = append(entries, Dir(dirs[i]+"/", 0, 0))
		}
		entries = append(entries, Entry{Name: name, Data: string(b), Mode: 0o755})
		// The name it is known by, if that is a link (/bin/sh, the
		// dynamic loader in /lib64): an absolute link in the image.
		alias := strings.TrimPrefix(filepath.Clean(host), "/")
		if !strings.HasPrefix(alias, "usr/") {
			alias = "usr/" + alias
		}
		if alias != name {
			entries = append(entries, Entry{Name: alias, Type: tar.TypeSymlink, Link: "/" + name})
		}
	}
	for f := range files {
		add(f)
	}
	entries = append(entries,
		File(strings.TrimPrefix(Marker, "/"), MarkerData),
		File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"),
		File("etc/group", "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"),
		Dir("srv/", 0, 0), Dir("srv/app/", 1000, 1000),
		Entry{Name: "srv/app/data", Data: "app\n", UID: 1000, GID: 1000},
		Entry{Name: "srv/far", Data: "far\n", UID: 70000, GID: 70000},
		Entry{Name: "usr/bin/suid", Data: "#!/bin/sh\n", Mode: 0o4755},
	)
	return entries
}

// WriteLayout writes an OCI image layout in dir holding one image of the
// given layers (the first gzip-compressed, the others not), tagged tag,
// and returns its manifest's digest.
func WriteLayout(t testing.TB, dir, tag string, layers ...[]byte) digest.Digest {
	t.Helper()
	blob := func(b []byte) digest.Digest {
		d := digest.FromBytes(b)
		p := filepath.Join(dir, "blobs", string(d.Algorithm()), d.Encoded())
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	config := ocispec.Image{Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH}, RootFS: ocispec.RootFS{Type: "layers"}}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest}
	for i, l := range layers {
		config.RootFS.DiffIDs = append(config.RootFS.DiffIDs, digest.FromBytes(l))
		desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer}
		if i == 0 {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(l)
			zw.Close()
			l = z.Bytes()
			desc.MediaType = ocispec.MediaTypeImageLayerGzip
		}
		desc.Digest, desc.Size = blob(l), int64(len(l))
		m.Layers = append(m.Layers, desc)
	}
	cb := mustJSON(t, config)
	m.Config = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: blob(cb), Size: int64(len(cb))}
	mb := mustJSON(t, m)
	md := blob(mb)
	index := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageManifest, Digest: md, Size: int64(len(mb)),
			Annotations: map[string]string{ocispec.AnnotationRefName: tag}}}}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), mustJSON(t, index), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ocispec.ImageLayoutFile), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return md
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Docker connects to the host's Docker engine, or returns why it
// cannot.
func Docker(ctx context.Context) (*client.Client, string) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, "docker client: " + err.Error()
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, "the Docker engine is unreachable: " + err.Error()
	}
	return cli, ""
}

// DockerImport imports layer into the engine as the image ref (docker
// import), removed when the test ends, and returns its id.
func DockerImport(t testing.TB, cli *client.Client, ref string, layer []byte) string {
	t.Helper()
	ctx := context.Background()
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(layer), SourceName: "-"}, ref, client.ImageImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(res)
	res.Close()
	t.Cleanup(func() {
		cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	img, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatalf("import %s: %v: %s", ref, err, out)
	}
	return img.ID
}
