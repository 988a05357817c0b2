// Package sandboxspec is what the providers make of a sandbox's spec: whether
// they can make the sandbox it asks for, and what its commands start
// from: their environment, and the users and host name /etc gives them.
package sandboxspec

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// Offer is what a provider can make.
type Offer struct {
	Name    string // the provider's, for errors
	MinDisk int64  // the smallest workspace
	RootFS  bool   // root filesystem directories (Spec.RootFS)
	Network bool   // NetworkOpen
	// NetworkAllow: the provider enforces NetworkAllow's rules.
	NetworkAllow bool
}

// Check checks that spec is valid and asks for what o offers.
func (o Offer) Check(spec provider.Spec) error {
	if err := provider.ValidateSpec(spec); err != nil {
		return err
	}
	if spec.RootFS != "" && !o.RootFS {
		return fmt.Errorf("%w: the %s provider takes images, not root filesystem directories: set Image", errdefs.ErrUnsupported, o.Name)
	}
	if spec.Image != "" && spec.RootFS != "" {
		return fmt.Errorf("%w: a sandbox has an image or a root filesystem, not both", errdefs.ErrBadInput)
	}
	switch {
	case spec.Network.Mode == provider.NetworkOpen && !o.Network:
		return fmt.Errorf("%w: the %s provider offers no network beyond loopback", errdefs.ErrUnsupported, o.Name)
	case spec.Network.Mode == provider.NetworkAllow && !o.NetworkAllow:
		return fmt.Errorf("%w: the %s provider cannot enforce a network allow list", errdefs.ErrUnsupported, o.Name)
	}
	if d := spec.Resources.Disk; d != 0 && d < o.MinDisk {
		return fmt.Errorf("%w: a workspace of %d bytes is below the minimum of %d (16 MiB)", errdefs.ErrBadInput, d, o.MinDisk)
	}
	if spec.RootFS != "" {
		fi, err := os.Stat(spec.RootFS)
		if err != nil || !fi.IsDir() || !filepath.IsAbs(spec.RootFS) {
			return fmt.Errorf("%w: root filesystem %q must be an absolute path to a directory", errdefs.ErrBadInput, spec.RootFS)
		}
	}
	return nil
}

// Env is the environment of commands in a sandbox of an image, over
// the image's own: the sandbox's user is "sandbox", its home the
// workspace, and env, the spec's, has the last word.
func Env(env map[string]string) map[string]string {
	m := map[string]string{
		"HOME":    provider.Workspace,
		"USER":    "sandbox",
		"LOGNAME": "sandbox",
		"TMPDIR":  "/tmp",
	}
	maps.Copy(m, env)
	return m
}

// HostEnv is Env for a sandbox whose root is the host's own or a
// directory, with no environment of its own: Env with a PATH and a
// locale.
func HostEnv(env map[string]string) map[string]string {
	m := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG": "C.UTF-8",
	}
	maps.Copy(m, env)
	return Env(m)
}

// Etc are the files of the host's /etc that would tell a sandbox who the
// host's users are and what the host is called, by name, with what the
// sandbox sees instead: its own users (root, sandbox, nobody) and name.
func Etc() map[string]string {
	return map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\n" +
			"sandbox:x:1000:1000:sandbox:/workspace:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":    "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n",
		"hostname": "sandbox\n",
		"hosts":    "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
}
