package image

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/berth-dev/berth/errdefs"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Docker's media types, which OCI layouts written by docker save use.
const (
	dockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerManifestV2   = "application/vnd.docker.distribution.manifest.v2+json"
	dockerLayer        = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

// maxZstdWindow bounds the memory a zstd layer may make its decoder
// take: 8 MiB windows are the default, 128 MiB zstd --long's.
const maxZstdWindow = 128 << 20

// Bounds of the JSON documents of a layout: an index or a manifest is a
// few KiB.
const maxDocument = 4 << 20

// ociRef says whether ref names an OCI layout, and splits it into the
// layout's path and a tag ("" for the layout's only image).
func ociRef(ref string) (path, tag string, ok bool) {
	rest, isOCI := strings.CutPrefix(ref, "oci:")
	if !isOCI && !strings.HasPrefix(ref, "/") && !strings.HasPrefix(ref, ".") {
		return "", "", false
	}
	path = rest
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		path, tag = rest[:i], rest[i+1:]
	}
	return path, tag, true
}

// resolveOCI finds the image of an OCI layout at path: the one tagged
// tag, or its only one.
func (c *Cache) resolveOCI(path, tag string) (*source, error) {
	ref := path
	if tag != "" {
		ref += ":" + tag
	}
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI image layout %.200q: %v", errdefs.ErrBadInput, path, unwrapPath(err))
	}
	defer root.Close()
	var index ocispec.Index
	if err := readJSON(root, "index.json", &index); err != nil {
		return nil, fmt.Errorf("%w: OCI image layout %.200q: %v", errdefs.ErrBadInput, path, err)
	}
	desc, err := pickManifest(root, index, tag)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI image layout %.200q: %v", errdefs.ErrBadInput, ref, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return &source{digest: desc.Digest, layers: func(context.Context, string) ([]layerOpener, error) {
		return ociLayers(abs, ref, desc)
	}}, nil
}

// pickManifest chooses the image manifest of an index: the one tagged
// tag, else the only one, following a nested index to this host's
// platform.
func pickManifest(root *os.Root, index ocispec.Index, tag string) (ocispec.Descriptor, error) {
	var found []ocispec.Descriptor
	for _, m := range index.Manifests {
		if tag == "" || m.Annotations[ocispec.AnnotationRefName] == tag {
			found = append(found, m)
		}
	}
	switch {
	case len(found) == 0 && tag != "":
		return ocispec.Descriptor{}, fmt.Errorf("no image is tagged %q", tag)
	case len(found) == 0:
		return ocispec.Descriptor{}, fmt.Errorf("it holds no image")
	case len(found) > 1:
		return ocispec.Descriptor{}, fmt.Errorf("it holds %d images: name one with :TAG", len(found))
	}
	desc := found[0]
	for depth := 0; ; depth++ {
		switch desc.MediaType {
		case ocispec.MediaTypeImageManifest, dockerManifestV2:
			return desc, nil
		case ocispec.MediaTypeImageIndex, dockerManifestList:
		default:
			return desc, fmt.Errorf("manifest of media type %q is not an image", desc.MediaType)
		}
		if depth > 3 {
			return desc, fmt.Errorf("indexes nested too deep")
		}
		var nested ocispec.Index
		if err := readBlobJSON(root, desc, &nested); err != nil {
			return desc, err
		}
		var match []ocispec.Descriptor
		for _, m := range nested.Manifests {
			if p := m.Platform; p == nil || (p.OS == "linux" && p.Architecture == runtime.GOARCH) {
				match = append(match, m)
			}
		}
		if len(match) == 0 {
			return desc, fmt.Errorf("no image for linux/%s", runtime.GOARCH)
		}
		desc = match[0]
	}
}

// ociLayers opens the layers of the manifest desc, each checked against
// its digest as it is read.
func ociLayers(path, ref string, desc ocispec.Descriptor) ([]layerOpener, error) {
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var m ocispec.Manifest
	if err := readBlobJSON(root, desc, &m); err != nil {
		return nil, fmt.Errorf("%w: OCI image layout %.200q: %v", errdefs.ErrBadInput, ref, err)
	}
	var layers []layerOpener
	for _, l := range m.Layers {
		switch l.MediaType {
		case ocispec.MediaTypeImageLayer, ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayerZstd, dockerLayer,
			"application/vnd.docker.image.rootfs.diff.tar":
		default:
			return nil, fmt.Errorf("%w: OCI image layout %.200q: layer of media type %.100q, not a tar", errdefs.ErrBadInput, ref, l.MediaType)
		}
		p, err := blobPath(l.Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: OCI image layout %.200q: %v", errdefs.ErrBadInput, ref, err)
		}
		layers = append(layers, func() (io.ReadCloser, error) {
			root, err := os.OpenRoot(path)
			if err != nil {
				return nil, err
			}
			defer root.Close()
			f, err := root.Open(p)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", errdefs.ErrBadInput, unwrapPath(err))
			}
			v := &verified{r: f, v: l.Digest.Verifier(), want: l.Digest, size: l.Size}
			return decompress(v, f)
		})
	}
	return layers, nil
}

// verified reads a blob, and at its end checks its digest and size.
type verified struct {
	r    io.Reader
	v    digest.Verifier
	want digest.Digest
	size int64
	n    int64
}

func (v *verified) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.n += int64(n)
	v.v.Write(p[:n])
	if err == io.EOF {
		if v.size > 0 && v.n != v.size {
			return n, fmt.Errorf("%w: blob %s is %d bytes, its descriptor says %d", errdefs.ErrBadInput, v.want, v.n, v.size)
		}
		if !v.v.Verified() {
			return n, fmt.Errorf("%w: blob %s does not match its digest", errdefs.ErrBadInput, v.want)
		}
	}
	return n, err
}

func blobPath(d digest.Digest) (string, error) {
	if err := d.Validate(); err != nil {
		return "", fmt.Errorf("digest %.100q: %v", d, err)
	}
	return filepath.Join("blobs", string(d.Algorithm()), d.Encoded()), nil
}

func readJSON(root *os.Root, name string, v any) error {
	b, err := readAllLimit(root, name, maxDocument)
	if err != nil {
		return unwrapPath(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	return nil
}

// readBlobJSON reads the JSON document desc names, checking its digest.
func readBlobJSON(root *os.Root, desc ocispec.Descriptor, v any) error {
	p, err := blobPath(desc.Digest)
	if err != nil {
		return err
	}
	b, err := readAllLimit(root, p, maxDocument)
	if err != nil {
		return unwrapPath(err)
	}
	if desc.Digest.Algorithm().FromBytes(b) != desc.Digest {
		return fmt.Errorf("blob %s does not match its digest", desc.Digest)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("blob %s: %v", desc.Digest, err)
	}
	return nil
}

// decompress reads a layer as a tar stream whatever its compression:
// gzip and zstd are told by their magic numbers. Closing it closes c.
func decompress(r io.Reader, c io.Closer) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%w: gzip: %v", errdefs.ErrBadInput, err)
		}
		return readCloser{zr, func() error { zr.Close(); return c.Close() }}, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%w: zstd: %v", errdefs.ErrBadInput, err)
		}
		return readCloser{zr, func() error { zr.Close(); return c.Close() }}, nil
	}
	return readCloser{br, c.Close}, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// unwrapPath drops the path an os.Root error repeats: messages name the
// layout already.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return fmt.Errorf("%s: %v", pe.Path, pe.Err)
	}
	return err
}
