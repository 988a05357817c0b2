package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/go-digest"
)

// Image describes an image in the cache.
type Image struct {
	// Digest names it: the Docker image's id or the OCI manifest's
	// digest.
	Digest string `json:"digest"`
	// Dir is its root filesystem.
	Dir string `json:"dir"`
	// Refs are the references it was asked for by.
	Refs []string `json:"refs,omitempty"`
	// Size and Files are what unpacking it wrote: bytes of file data
	// and entries of its layers.
	Size  int64 `json:"size"`
	Files int   `json:"files"`
	// LastUsed is when RootFS last returned it.
	LastUsed time.Time `json:"last_used"`
	// InUse: some mount namespace on the host has part of it mounted, as
	// a sandbox's root does.
	InUse bool `json:"in_use"`
}

// List describes the images in the cache, sorted by digest.
func (c *Cache) List(ctx context.Context) ([]Image, error) {
	used, err := c.mounted()
	if err != nil {
		return nil, err
	}
	var out []Image
	algs, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, err
	}
	for _, a := range algs {
		alg := digest.Algorithm(a.Name())
		if !a.IsDir() || !alg.Available() {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(c.dir, a.Name()))
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			d := digest.NewDigestFromEncoded(alg, e.Name())
			if !e.IsDir() || d.Validate() != nil {
				continue
			}
			out = append(out, c.describe(d, used))
		}
	}
	slices.SortFunc(out, func(a, b Image) int { return strings.Compare(a.Digest, b.Digest) })
	return out, nil
}

func (c *Cache) describe(d digest.Digest, used func(string) bool) Image {
	img := Image{Digest: d.String(), Dir: c.imageDir(d), InUse: used(c.imageDir(d))}
	if rec, err := c.readRecord(d); err == nil {
		img.Refs, img.Size, img.Files = rec.Refs, rec.Size, rec.Files
	}
	if fi, err := os.Stat(c.recordPath(d)); err == nil {
		img.LastUsed = fi.ModTime()
	}
	return img
}

// Remove removes an image from the cache: ref is a reference RootFS was
// given, or the image's digest. Removing an image that is not in the
// cache is not an error; removing one in use is an error wrapping
// ErrInUse, since its files would vanish from under the sandboxes that
// have it mounted.
func (c *Cache) Remove(ctx context.Context, ref string) error {
	if d, err := digest.Parse(ref); err == nil {
		return c.remove(ctx, d, 0)
	}
	src, err := c.resolve(ctx, ref)
	if err != nil {
		// An image gone from where it came from is still found by the
		// references it was unpacked for.
		imgs, lerr := c.List(ctx)
		if lerr != nil {
			return err
		}
		for _, img := range imgs {
			if slices.Contains(img.Refs, ref) {
				return c.remove(ctx, digest.Digest(img.Digest), 0)
			}
		}
		return err
	}
	return c.remove(ctx, src.digest, 0)
}

// Prune removes every image of the cache that is not in use and was not
// returned by RootFS in the last grace (a sandbox being created may not
// have mounted its image yet: give a grace longer than a creation takes;
// zero means a minute). It returns what it removed.
func (c *Cache) Prune(ctx context.Context, grace time.Duration) ([]Image, error) {
	if grace <= 0 {
		grace = time.Minute
	}
	imgs, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	var removed []Image
	for _, img := range imgs {
		if img.InUse || time.Since(img.LastUsed) < grace {
			continue
		}
		err := c.remove(ctx, digest.Digest(img.Digest), grace)
		if errors.Is(err, ErrInUse) {
			continue
		}
		if err != nil {
			return removed, err
		}
		removed = append(removed, img)
	}
	return removed, nil
}

// remove removes the image d unless it is in use or, given a grace, was
// used within it.
func (c *Cache) remove(ctx context.Context, d digest.Digest, grace time.Duration) error {
	unlock, err := c.lock(ctx, d)
	if err != nil {
		return err
	}
	defer unlock()
	dir := c.imageDir(d)
	if !isDir(dir) {
		os.Remove(c.recordPath(d))
		return nil
	}
	used, err := c.mounted()
	if err != nil {
		return err
	}
	if used(dir) {
		return fmt.Errorf("%w: %s is mounted by a sandbox", ErrInUse, d)
	}
	if fi, err := os.Stat(c.recordPath(d)); grace > 0 && err == nil && time.Since(fi.ModTime()) < grace {
		return fmt.Errorf("%w: %s was used %v ago", ErrInUse, d, time.Since(fi.ModTime()).Round(time.Second))
	}
	// Out of place first: a directory in place is whole.
	trash := filepath.Join(c.dir, tmpDir, tmpName(d)+".removing")
	if err := os.RemoveAll(trash); err != nil {
		return err
	}
	if err := os.Rename(dir, trash); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	os.Remove(c.recordPath(d))
	c.opts.log.Info("image removed", "digest", d.String())
	return os.RemoveAll(trash)
}

// mounted returns a test of whether a directory of the cache, or part of
// it, is mounted in any mount namespace of the host: sandboxes mount
// their root's entries from it.
func (c *Cache) mounted() (func(dir string) bool, error) {
	self, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	// Mount tables name a mount's source by its device and its path in
	// that device's file system, not by the path it is reached by here.
	var fsMount *mountinfo.Info
	for _, m := range self {
		if within(c.dir, m.Mountpoint) && (fsMount == nil || len(m.Mountpoint) > len(fsMount.Mountpoint)) {
			fsMount = m
		}
	}
	if fsMount == nil {
		return nil, fmt.Errorf("image cache: no mount holds %s", c.dir)
	}
	rel, err := filepath.Rel(fsMount.Mountpoint, c.dir)
	if err != nil {
		return nil, err
	}
	base := filepath.Join(fsMount.Root, rel)
	// Roots mounted from the cache, as paths below the cache's directory.
	roots := map[string]bool{}
	seen := map[string]bool{}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		ns, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns/mnt"))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		mounts, err := pidMounts(pid)
		if err != nil {
			continue // the process ended
		}
		for _, m := range mounts {
			if m.Major == fsMount.Major && m.Minor == fsMount.Minor && within(m.Root, base) && m.Root != base {
				roots[m.Root[len(base):]] = true
			}
		}
	}
	return func(dir string) bool {
		rel, err := filepath.Rel(c.dir, dir)
		if err != nil {
			return false
		}
		prefix := "/" + rel
		for r := range roots {
			if within(r, prefix) {
				return true
			}
		}
		return false
	}, nil
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

func pidMounts(pid int) ([]*mountinfo.Info, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.GetMountsFromReader(f, nil)
}
