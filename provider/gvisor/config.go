package gvisor

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"path/filepath"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet"
	"github.com/berth-dev/berth/provider/internal/settings"
	"github.com/berth-dev/berth/provider/internal/wsimage"
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
	// it must call gvisorinit.Main. It runs on the sandbox's root filesystem, so it
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
	// Network gives sandboxes networks beyond loopback (NetworkAllow
	// and NetworkOpen) when its ProxyAddr is set; zero means loopback
	// only, as before.
	Network NetworkConfig
	// netSettings are the network settings of provider.Open, which
	// register.go starts hostNet from; Close stops it.
	netSettings hostnet.Settings
	hostNet     *hostnet.Host

	// Logger receives the provider's own events. Nil discards them.
	Logger *slog.Logger
}

// NetworkConfig is the host side of sandboxes' networks, which the
// linux, docker and gvisor providers share (see hostnet.NetworkConfig).
type NetworkConfig = hostnet.NetworkConfig

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
	err := settings.StateDir(&c.StateDir, DefaultStateDir)
	if err != nil {
		return err
	}
	if c.ImageDir == "" {
		c.ImageDir = filepath.Join(c.StateDir, ".images")
	}
	if c.Runsc == "" {
		c.Runsc = "runsc"
	}
	if c.Runsc, err = exec.LookPath(c.Runsc); err != nil {
		return fmt.Errorf("%w: runsc not found (%v): install gVisor's runsc or set runsc=PATH", errdefs.ErrUnsupported, err)
	}
	if c.Platform == "" {
		c.Platform = "systrap"
	}
	if c.DaemonPath == "" {
		if c.DaemonPath, err = settings.DaemonBeside(DaemonName, true); err != nil {
			return err
		}
	}
	if c.DaemonPath, err = filepath.Abs(c.DaemonPath); err != nil {
		return err
	}
	if !settings.IsFile(c.DaemonPath) {
		return fmt.Errorf("%w: daemon binary %s is not a file", errdefs.ErrBadInput, c.DaemonPath)
	}
	if err := settings.Defaults(&c.Defaults, DefaultDisk, MinDisk); err != nil {
		return err
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

// fromProviderConfig decodes the text settings of provider.Open.
func fromProviderConfig(pc provider.Config) (Config, error) {
	var c Config
	err := settings.Decode(Name, pc, settings.Resources(&c.Defaults), map[string]settings.Setting{
		"state-dir":  settings.String(&c.StateDir),
		"runsc":      settings.String(&c.Runsc),
		"image-dir":  settings.String(&c.ImageDir),
		"platform":   settings.String(&c.Platform),
		"daemon":     settings.String(&c.DaemonPath),
		"pool":       settings.Int(&c.Pool),
		"open-files": settings.Int64(&c.OpenFiles),
	}, c.netSettings.Decoders())
	return c, err
}

// networkDefaults are the network settings' defaults (see package
// hostnet and docs/providers/gvisor.md). The linux, docker and gvisor
// providers' differ, so that all three run on one host: each has a
// pool, a proxy and a DNS stub of its own.
func networkDefaults() hostnet.Defaults {
	return hostnet.Defaults{Pool: netip.MustParsePrefix("100.98.0.0/16"), ProxyPort: 15003, DNSPort: 15055}
}
