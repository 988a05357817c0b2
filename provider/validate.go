package provider

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/berth-dev/berth/errdefs"
)

// Limits on names that come from callers. They keep ids usable as file,
// cgroup and container names, and labels small enough to store anywhere.
const (
	MaxIDLen         = 63
	MaxLabels        = 64
	MaxLabelKeyLen   = 128
	MaxLabelValueLen = 256
	MaxPathLen       = 4096
)

// ValidateID checks an id for a sandbox or a command: 1 to 63 characters
// from [a-zA-Z0-9_.-], starting with a letter or a digit.
func ValidateID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("%w: id %q must have 1 to %d characters", errdefs.ErrBadInput, truncate(id), MaxIDLen)
	}
	for i, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '-' || c == '_' || c == '.'):
		default:
			return fmt.Errorf("%w: id %q may hold only letters, digits, '-', '_' and '.', and must start with a letter or digit", errdefs.ErrBadInput, truncate(id))
		}
	}
	return nil
}

// ValidateLabels checks label keys and values: at most 64 labels, keys of
// 1 to 128 printable characters without '=' or ',', values of at most 256
// printable characters.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: %d labels, at most %d allowed", errdefs.ErrBadInput, len(labels), MaxLabels)
	}
	for k, v := range labels {
		if k == "" || len(k) > MaxLabelKeyLen || strings.ContainsAny(k, "=,") || !printable(k) {
			return fmt.Errorf("%w: label key %q must have 1 to %d printable characters and no '=' or ','", errdefs.ErrBadInput, truncate(k), MaxLabelKeyLen)
		}
		if len(v) > MaxLabelValueLen || !printable(v) {
			return fmt.Errorf("%w: label %q: value must have at most %d printable characters", errdefs.ErrBadInput, k, MaxLabelValueLen)
		}
	}
	return nil
}

// ValidateSpec checks the parts of a spec that do not depend on the
// provider. It does not check ID when it is empty.
func ValidateSpec(spec Spec) error {
	if spec.ID != "" {
		if err := ValidateID(spec.ID); err != nil {
			return err
		}
	}
	if err := ValidateLabels(spec.Labels); err != nil {
		return err
	}
	if err := ValidateEnv(spec.Env); err != nil {
		return err
	}
	if spec.Dir != "" {
		if _, err := WorkspacePath(spec.Dir); err != nil {
			return err
		}
	}
	if err := ValidateResources(spec.Resources); err != nil {
		return err
	}
	if err := validateImage(spec.Image); err != nil {
		return err
	}
	if spec.Lifetime < 0 {
		return fmt.Errorf("%w: negative lifetime %v", errdefs.ErrBadInput, spec.Lifetime)
	}
	if spec.Lease != 0 && spec.Lease < MinLease {
		return fmt.Errorf("%w: lease %v is shorter than %v", errdefs.ErrBadInput, spec.Lease, MinLease)
	}
	return spec.Network.Validate()
}

// The smallest limits a sandbox can start and run a shell under. Below
// them creation fails in ways that say nothing of the cause (the linux
// provider's cgroup refuses a memory limit under what its daemon already
// uses; a few pids are taken by the daemon's own threads), so they are
// refused first, as bad input. Measured on the linux provider: its daemon
// starts in 4 MiB and a Python interpreter needs 8 MiB; a pipeline needs
// more than 8 pids.
const (
	MinMemory = 16 << 20 // bytes
	MinPids   = 32
	MinCPU    = 0.01    // cores: a cgroup's smallest useful CPU quota
	MinDisk   = 1 << 20 // bytes
)

// ValidateResources checks limits: each is zero (the provider's default)
// or at least its minimum above.
func ValidateResources(r Resources) error {
	switch {
	case r.Memory < 0 || r.Pids < 0 || r.Disk < 0 || r.CPU < 0 || r.CPU != r.CPU:
		return fmt.Errorf("%w: resources must not be negative: %+v", errdefs.ErrBadInput, r)
	case r.Memory != 0 && r.Memory < MinMemory:
		return fmt.Errorf("%w: memory limit %d bytes is below the minimum of %d MiB a sandbox needs to start", errdefs.ErrBadInput, r.Memory, MinMemory>>20)
	case r.Pids != 0 && r.Pids < MinPids:
		return fmt.Errorf("%w: pids limit %d is below the minimum of %d a sandbox needs to start", errdefs.ErrBadInput, r.Pids, MinPids)
	case r.CPU != 0 && r.CPU < MinCPU:
		return fmt.Errorf("%w: CPU limit %g is below the minimum of %g cores", errdefs.ErrBadInput, r.CPU, MinCPU)
	case r.Disk != 0 && r.Disk < MinDisk:
		return fmt.Errorf("%w: disk limit %d bytes is below the minimum of %d MiB", errdefs.ErrBadInput, r.Disk, MinDisk>>20)
	}
	return nil
}

// ValidateEnv checks environment variable names and values: names are
// non-empty and hold no '=' or NUL, values hold no NUL.
func ValidateEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: environment variable %q: names must be non-empty without '=' or NUL, values without NUL", errdefs.ErrBadInput, truncate(k))
		}
	}
	return nil
}

// MaxTerminalSide bounds a terminal's rows and columns.
const MaxTerminalSide = 4096

// ValidateExec checks the parts of a request that do not depend on the
// provider.
func ValidateExec(req ExecRequest) error {
	if req.ID != "" {
		if err := ValidateID(req.ID); err != nil {
			return err
		}
	}
	switch {
	case len(req.Argv) == 0 && req.Shell == "":
		return fmt.Errorf("%w: no command: set Argv or Shell", errdefs.ErrBadInput)
	case len(req.Argv) > 0 && req.Shell != "":
		return fmt.Errorf("%w: set Argv or Shell, not both", errdefs.ErrBadInput)
	case len(req.Argv) > 0 && req.Argv[0] == "":
		return fmt.Errorf("%w: empty program name", errdefs.ErrBadInput)
	}
	for _, a := range req.Argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("%w: argument holds a NUL byte", errdefs.ErrBadInput)
		}
	}
	if strings.ContainsRune(req.Shell, 0) {
		return fmt.Errorf("%w: shell command holds a NUL byte", errdefs.ErrBadInput)
	}
	if req.Timeout < 0 || req.StdoutOffset < 0 || req.StderrOffset < 0 {
		return fmt.Errorf("%w: negative timeout or offset", errdefs.ErrBadInput)
	}
	if req.Dir != "" {
		if _, err := WorkspacePath(req.Dir); err != nil {
			return err
		}
	}
	if req.TTY != nil {
		if req.Stdin != nil {
			return fmt.Errorf("%w: a command on a terminal takes its input through the terminal, not Stdin", errdefs.ErrBadInput)
		}
		if req.TTY.Rows > MaxTerminalSide || req.TTY.Cols > MaxTerminalSide {
			return fmt.Errorf("%w: terminal of %dx%d: at most %d rows and columns", errdefs.ErrBadInput, req.TTY.Rows, req.TTY.Cols, MaxTerminalSide)
		}
	}
	return ValidateEnv(req.Env)
}

// WorkspacePath turns a caller's path into a clean path relative to the
// workspace root ("." for the root itself). It rejects paths that leave
// the workspace lexically; symbolic links are the backend's to check, at
// the moment it opens the file.
func WorkspacePath(p string) (string, error) {
	if p == "" || len(p) > MaxPathLen || strings.ContainsRune(p, 0) || !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: path %q must be 1 to %d bytes of UTF-8 without NUL", errdefs.ErrBadInput, truncate(p), MaxPathLen)
	}
	if path.IsAbs(p) {
		rel, ok := strings.CutPrefix(path.Clean(p), Workspace)
		if !ok || (rel != "" && rel[0] != '/') {
			return "", fmt.Errorf("%w: path %q is outside %s", errdefs.ErrBadInput, truncate(p), Workspace)
		}
		p = "." + rel
	}
	if Escapes(p) {
		return "", fmt.Errorf("%w: path %q leaves %s", errdefs.ErrBadInput, truncate(p), Workspace)
	}
	return path.Clean(p), nil
}

// Escapes reports whether the slash-separated name p, taken from a
// directory (an archive's entry, a link's target, a path in the
// workspace), leads out of it by its text alone: absolute, or climbing
// above it with "..". Symbolic links on the way are the opener's to
// check.
func Escapes(p string) bool {
	// Cleaning a relative path keeps leading ".." elements, so one check
	// catches every lexical escape.
	clean := path.Clean(p)
	return path.IsAbs(p) || clean == ".." || strings.HasPrefix(clean, "../")
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// truncate keeps hostile inputs from flooding error messages.
func truncate(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// maxImageRef bounds an image reference; Docker's own limit on a
// repository name is 255.
const maxImageRef = 512

// validateImage checks an image reference lexically: printable, no
// spaces, bounded. Each provider resolves it its own way.
func validateImage(ref string) error {
	if len(ref) > maxImageRef {
		return fmt.Errorf("%w: image reference of %d bytes; at most %d", errdefs.ErrBadInput, len(ref), maxImageRef)
	}
	for _, r := range ref {
		if r <= ' ' || r == 0x7f || r > '~' {
			return fmt.Errorf("%w: image reference %q: only printable ASCII without spaces", errdefs.ErrBadInput, ref)
		}
	}
	return nil
}

// Signals are the signals a caller may send to a command (Signaler), by
// their names without the SIG prefix. Others (STOP, SEGV...) would leave
// a command in states berth does not report, and are refused.
var Signals = []string{"INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2"}

// ParseSignal turns a signal's name, with or without its SIG prefix, in
// any case ("int", "SIGTERM"), into its form in Signals, or fails with
// errdefs.ErrBadInput.
func ParseSignal(sig string) (string, error) {
	name := strings.TrimPrefix(strings.ToUpper(sig), "SIG")
	if slices.Contains(Signals, name) {
		return name, nil
	}
	if len(sig) > 16 {
		sig = sig[:16] + "..."
	}
	return "", fmt.Errorf("%w: signal %q: want one of %s", errdefs.ErrBadInput, sig, strings.Join(Signals, ", "))
}
