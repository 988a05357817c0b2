package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/opencontainers/go-digest"

	"github.com/berth-dev/berth/internal/untar"
)

// engine returns the client of the host's Docker engine, connecting on
// first use.
func (c *Cache) engine(ctx context.Context) (*client.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.docker != nil {
		return c.docker, nil
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("%w: image cache: docker client: %v", errdefs.ErrBadInput, oneLine(err))
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: images are read from the Docker engine, which does not answer (%s): start it, or give an OCI image layout as oci:PATH", errdefs.ErrUnsupported, oneLine(err))
	}
	c.docker = cli
	return cli, nil
}

// resolveDocker finds ref on the host's engine, pulling it when it is
// not there and a registry has it.
func (c *Cache) resolveDocker(ctx context.Context, ref string) (*source, error) {
	cli, err := c.engine(ctx)
	if err != nil {
		return nil, err
	}
	img, err := cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		if err = c.pull(ctx, cli, ref); err == nil {
			img, err = cli.ImageInspect(ctx, ref)
		}
	}
	switch {
	case err == nil:
	case cerrdefs.IsInvalidArgument(err):
		return nil, fmt.Errorf("%w: image %.200q is not a valid image reference", errdefs.ErrBadInput, ref)
	case errors.As(err, new(*notPulledError)):
		return nil, fmt.Errorf("%w: image %.200q is not on this host and cannot be pulled (%s): docker pull it where a registry is reachable, or bring it with docker load or docker import", errdefs.ErrBadInput, ref, oneLine(err))
	default:
		return nil, fmt.Errorf("inspect image %.200q: %s", ref, oneLine(err))
	}
	id, err := digest.Parse(img.ID)
	if err != nil {
		return nil, fmt.Errorf("image %.200q: the engine gave the id %.100q: %v", ref, img.ID, err)
	}
	return &source{digest: id, layers: func(ctx context.Context, work string) ([]layerOpener, error) {
		return c.saveDocker(ctx, cli, ref, id, work)
	}}, nil
}

// notPulledError is a pull that failed.
type notPulledError struct{ err error }

func (e *notPulledError) Error() string { return e.err.Error() }

// pull brings ref from its registry, within the pull timeout.
func (c *Cache) pull(ctx context.Context, cli *client.Client, ref string) error {
	if c.opts.pullTimeout < 0 {
		return &notPulledError{errors.New("pulls are disabled")}
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.pullTimeout)
	defer cancel()
	c.opts.log.Info("pulling image", "image", ref)
	err := Pull(ctx, cli, ref, c.opts.log)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("not done after %v", c.opts.pullTimeout)
		}
		return &notPulledError{err}
	}
	return nil
}

// dockerManifest is an entry of the manifest.json of docker save.
type dockerManifest struct {
	Config string
	Layers []string
}

// saveDocker spools docker save of the image id into work and opens its
// layers: the stream lists its layers after them, in no set order.
func (c *Cache) saveDocker(ctx context.Context, cli *client.Client, ref string, id digest.Digest, work string) ([]layerOpener, error) {
	rc, err := cli.ImageSave(ctx, []string{id.String()})
	if err != nil {
		return nil, fmt.Errorf("docker save %.200q: %s", ref, oneLine(err))
	}
	defer rc.Close()
	saved := filepath.Join(work, "save")
	err = untar.Extract(rc, saved, untar.Options{Root: true, MaxBytes: c.opts.maxSize + 64<<20})
	if errors.Is(err, untar.ErrLimit) {
		return nil, fmt.Errorf("%w: image %.200q: %v (image cache bound: %d bytes)", errdefs.ErrBadInput, ref, err, c.opts.maxSize)
	}
	if err != nil {
		return nil, fmt.Errorf("docker save %.200q: %v", ref, err)
	}
	root, err := os.OpenRoot(saved)
	if err != nil {
		return nil, err
	}
	b, err := readAllLimit(root, "manifest.json", 16<<20)
	root.Close()
	if err != nil {
		return nil, fmt.Errorf("docker save %.200q: %w", ref, err)
	}
	var ms []dockerManifest
	if err := json.Unmarshal(b, &ms); err != nil || len(ms) != 1 {
		return nil, fmt.Errorf("docker save %.200q: manifest.json holds no single image (%v)", ref, err)
	}
	var layers []layerOpener
	for _, l := range ms[0].Layers {
		layers = append(layers, func() (io.ReadCloser, error) {
			// Layers may be links to blobs: os.Root keeps them inside.
			root, err := os.OpenRoot(saved)
			if err != nil {
				return nil, err
			}
			defer root.Close()
			f, err := root.Open(l)
			if err != nil {
				return nil, err
			}
			return decompress(f, f)
		})
	}
	return layers, nil
}

func readAllLimit(root *os.Root, name string, limit int64) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", errdefs.ErrBadInput, name, limit)
	}
	return b, nil
}

// oneLine keeps the first line of an error from Docker: errors berth
// reports are one line.
func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// Pull pulls ref into the Docker engine cli from its registry, logging
// its progress to log.
func Pull(ctx context.Context, cli *client.Client, ref string, log *slog.Logger) error {
	resp, err := cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	last := time.Now()
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if msg.Error != nil {
			return errors.New(msg.Error.Message)
		}
		if time.Since(last) > 2*time.Second || msg.Progress == nil {
			last = time.Now()
			log.Info("pulling image", "image", ref, "layer", msg.ID, "status", msg.Status)
		}
	}
	return nil
}
