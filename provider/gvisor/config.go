package gvisor

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/berth-dev/berth/internal/wsimage"
	"github.com/berth-dev/berth/provider"
)

// Config sets up the provider. The zero value is usable on a host with
// runsc in PATH and berth-sandboxd beside the executable.
type Config struct {
	// StateDir holds each sandbox's record and container directory
	// (OCI bundle, sockets, workspace image), and runsc's own state.
	// Zero means /var/lib/berth/gvisor.
	StateDir string
	// Runsc is the runsc binary. Zero means runsc in PATH.
	Runsc string
	// ImageDir is the cache of root filesystems unpacked from images
	// (Spec.Image; see package image). Zero means StateDir/.images.
	ImageDir string
	// Platform is runsc's platform. Zero means systrap, which works
	// without virtualisation; kvm needs /dev/kvm.
	Platform string
	// DaemonPath is the binary started as each sandbox's first process;
	// it must call Main. It runs on the sandbox's root filesystem, so it
	// should be static (CGO_ENABLED=0). Zero means berth-sandboxd beside
	// this process's executable if there is one, else the executable
	// itself.
	DaemonPath string
	// Defaults are the limits of a sandbox whose spec names none. Zero
	// fields mean 2 GiB of memory, 4096 processes, CPU unlimited, and a
	// workspace of 10 GiB (DefaultDisk) holding one file per 16 KiB.
	Defaults provider.Resources
	// Pool is how many started, unclaimed sandboxes of the host's root
	// filesystem and default limits the provider keeps ready once it has
	// created a sandbox, so that creation does not wait for runsc. Zero
	// means 2; a negative number keeps none.
	Pool int
	// OpenFiles is RLIMIT_NOFILE of every process in a sandbox. Zero
	// means 1024.
	OpenFiles int64
	// Logger receives the provider's own events. Nil discards them.
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultStateDir = "/var/lib/berth/gvisor"
	// DefaultDisk is a workspace's size when neither the sandbox nor the
	// configuration names one.
	DefaultDisk = 10 << 30
	// MinDisk is the smallest workspace: what an ext4 image needs.
	MinDisk = wsimage.MinSize
	// DaemonName is the daemon binary's name beside the executable.
	DaemonName = "berth-sandboxd"
)

func (c *Config) setDefaults() error {
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	dir, err := filepath.Abs(c.StateDir)
	if err != nil {
		return err
	}
	c.StateDir = dir
	if c.ImageDir == "" {
		c.ImageDir = filepath.Join(c.StateDir, ".images")
	}
	if c.Runsc == "" {
		c.Runsc = "runsc"
	}
	if c.Runsc, err = exec.LookPath(c.Runsc); err != nil {
		return fmt.Errorf("%w: runsc not found (%v): install gVisor's runsc or set runsc=PATH", provider.ErrUnsupported, err)
	}
	if c.Platform == "" {
		c.Platform = "systrap"
	}
	if c.DaemonPath == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable: %w", err)
		}
		c.DaemonPath = self
		if d := filepath.Join(filepath.Dir(self), DaemonName); isFile(d) {
			c.DaemonPath = d
		}
	}
	if c.DaemonPath, err = filepath.Abs(c.DaemonPath); err != nil {
		return err
	}
	if !isFile(c.DaemonPath) {
		return fmt.Errorf("%w: daemon binary %s is not a file", provider.ErrBadInput, c.DaemonPath)
	}
	if c.Defaults.Memory == 0 {
		c.Defaults.Memory = 2 << 30
	}
	if c.Defaults.Pids == 0 {
		c.Defaults.Pids = 4096
	}
	if c.Defaults.Disk == 0 {
		c.Defaults.Disk = DefaultDisk
	}
	if c.Defaults.Disk < MinDisk {
		return fmt.Errorf("%w: default disk of %d bytes is below the minimum of %d", provider.ErrBadInput, c.Defaults.Disk, int64(MinDisk))
	}
	if c.Pool == 0 {
		c.Pool = 2
	}
	if c.OpenFiles == 0 {
		c.OpenFiles = 1024
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// fromProviderConfig decodes the text settings of provider.Open.
func fromProviderConfig(pc provider.Config) (Config, error) {
	var c Config
	for k, v := range pc {
		var err error
		switch k {
		case "state-dir":
			c.StateDir = v
		case "runsc":
			c.Runsc = v
		case "image-dir":
			c.ImageDir = v
		case "platform":
			c.Platform = v
		case "daemon":
			c.DaemonPath = v
		case "memory":
			c.Defaults.Memory, err = strconv.ParseInt(v, 10, 64)
		case "pids":
			c.Defaults.Pids, err = strconv.ParseInt(v, 10, 64)
		case "cpu":
			c.Defaults.CPU, err = strconv.ParseFloat(v, 64)
		case "disk":
			c.Defaults.Disk, err = strconv.ParseInt(v, 10, 64)
		case "pool":
			c.Pool, err = strconv.Atoi(v)
		case "open-files":
			c.OpenFiles, err = strconv.ParseInt(v, 10, 64)
		default:
			return c, fmt.Errorf("%w: gvisor provider: unknown setting %q", provider.ErrBadInput, k)
		}
		if err != nil {
			return c, fmt.Errorf("%w: gvisor provider: setting %q: %v", provider.ErrBadInput, k, err)
		}
	}
	return c, nil
}
