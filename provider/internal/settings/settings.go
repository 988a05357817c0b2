// Package settings decodes a provider's text settings (provider.Config)
// into its typed configuration, and fills in the defaults the providers
// share.
package settings

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// A Setting decodes one setting's text into its field.
type Setting func(v string) error

// String sets *p to the text as it is.
func String(p *string) Setting { return func(v string) error { *p = v; return nil } }

// Int sets *p to the text as a decimal number.
func Int(p *int) Setting {
	return func(v string) (err error) { *p, err = strconv.Atoi(v); return err }
}

// Int64 sets *p to the text as a decimal number.
func Int64(p *int64) Setting {
	return func(v string) (err error) { *p, err = strconv.ParseInt(v, 10, 64); return err }
}

// Float sets *p to the text as a number.
func Float(p *float64) Setting {
	return func(v string) (err error) { *p, err = strconv.ParseFloat(v, 64); return err }
}

// Duration sets *p to the text as a Go duration ("90s").
func Duration(p *time.Duration) Setting {
	return func(v string) (err error) { *p, err = time.ParseDuration(v); return err }
}

// Resources are the settings of a provider's default limits: memory,
// pids, cpu and disk.
func Resources(r *provider.Resources) map[string]Setting {
	return map[string]Setting{
		"memory": Int64(&r.Memory),
		"pids":   Int64(&r.Pids),
		"cpu":    Float(&r.CPU),
		"disk":   Int64(&r.Disk),
	}
}

// Decode decodes the settings pc of provider name through known, by
// setting name. An unknown setting, or a value that does not decode, is
// errdefs.ErrBadInput.
func Decode(name string, pc provider.Config, known ...map[string]Setting) error {
	for k, v := range pc {
		var set Setting
		for _, m := range known {
			if s, ok := m[k]; ok {
				set = s
			}
		}
		if set == nil {
			return fmt.Errorf("%w: %s provider: unknown setting %q", errdefs.ErrBadInput, name, k)
		}
		if err := set(v); err != nil {
			return fmt.Errorf("%w: %s provider: setting %q: %v", errdefs.ErrBadInput, name, k, err)
		}
	}
	return nil
}

// StateDir makes *dir absolute, def when it is empty.
func StateDir(dir *string, def string) error {
	if *dir == "" {
		*dir = def
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	*dir = abs
	return nil
}

// DaemonBeside is the daemon binary called name beside this process's
// executable; if there is no such file and orSelf is set, it is the
// executable itself.
func DaemonBeside(name string, orSelf bool) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	d := filepath.Join(filepath.Dir(self), name)
	if orSelf && !IsFile(d) {
		return self, nil
	}
	return d, nil
}

// IsFile reports whether p is a regular file.
func IsFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Defaults fills the zero fields of a provider's default limits: 2 GiB
// of memory, 4096 processes, a workspace of disk bytes (CPU stays
// unlimited), and checks the workspace is minDisk or more.
func Defaults(r *provider.Resources, disk, minDisk int64) error {
	if r.Memory == 0 {
		r.Memory = 2 << 30
	}
	if r.Pids == 0 {
		r.Pids = 4096
	}
	if r.Disk == 0 {
		r.Disk = disk
	}
	if r.Disk < minDisk {
		return fmt.Errorf("%w: default disk of %d bytes is below the minimum of %d", errdefs.ErrBadInput, r.Disk, minDisk)
	}
	return nil
}

// Fill gives the zero fields of a sandbox's limits r their defaults.
func Fill(r, defaults provider.Resources) provider.Resources {
	if r.Memory == 0 {
		r.Memory = defaults.Memory
	}
	if r.Pids == 0 {
		r.Pids = defaults.Pids
	}
	if r.CPU == 0 {
		r.CPU = defaults.CPU
	}
	if r.Disk == 0 {
		r.Disk = defaults.Disk
	}
	return r
}

// APIKey reads a hosted service's API key named by a provider's
// settings: from the file keyFile when it is set, else from the
// environment variable keyEnv. The key is never part of an error.
// Both set, or no key found, is an error: errdefs.ErrBadInput for the
// former, errdefs.ErrProviderAuth for the latter (the provider is then
// listed as unavailable, why included).
func APIKey(name string, pc provider.Config, keyEnv, keyFile string) (string, error) {
	if keyFile != "" {
		if _, set := pc["api-key-env"]; set {
			return "", fmt.Errorf("%w: %s provider: api-key-env and api-key-file both set", errdefs.ErrBadInput, name)
		}
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return "", fmt.Errorf("%w: %s provider: read api-key-file: %v", errdefs.ErrProviderAuth, name, errors.Unwrap(err))
		}
		key := strings.TrimSpace(string(b))
		if key == "" {
			return "", fmt.Errorf("%w: %s provider: api-key-file %s is empty", errdefs.ErrProviderAuth, name, keyFile)
		}
		return key, nil
	}
	key := strings.TrimSpace(os.Getenv(keyEnv))
	if key == "" {
		return "", fmt.Errorf("%w: %s provider: no API key in $%s", errdefs.ErrProviderAuth, name, keyEnv)
	}
	return key, nil
}
