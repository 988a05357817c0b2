package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/provider/gvisor/gvisorinit"
)

// runscCmd is the runsc binary on the provider's runsc state directory
// with the flags every sandbox shares:
//   - no network at all (--network=none), the sandbox has loopback
//     only, unless networked: then gVisor's network stack takes over
//     the interfaces of the namespace the bundle names
//     (--network=sandbox), which the host polices from outside;
//   - the root filesystem's overlay off (--overlay2=none): the root is
//     read-only mount points, and a writable upper layer in memory would
//     be a second, unbounded /tmp;
//   - --host-uds=create: a unix socket the daemon binds in its bound run
//     directory is a socket of the host's, which is how the host reaches
//     it. Sandboxes may create sockets, never connect to the host's.
func (p *Provider) runscCmd(ctx context.Context, logFile string, networked bool, args ...string) *exec.Cmd {
	network := "none"
	if networked {
		network = "sandbox"
	}
	full := []string{
		"--root", filepath.Join(p.cfg.StateDir, runscDir),
		"--platform", p.cfg.Platform,
		"--network", network,
		"--overlay2", "none",
		"--host-uds", "create",
		"--file-access", "exclusive",
	}
	if logFile != "" {
		full = append(full, "--log", logFile)
	}
	return exec.CommandContext(ctx, p.cfg.Runsc, append(full, args...)...)
}

// runsc runs a runsc command and returns its standard output.
func (p *Provider) runsc(ctx context.Context, args ...string) ([]byte, error) {
	cmd := p.runscCmd(ctx, "", false, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return out, fmt.Errorf("runsc %s: %w: %s", args[0], err, msg)
	}
	return out, nil
}

// runContainer starts the container of the bundle in dir, detached, with
// its standard output and error going to the daemon's log, and stat,
// unless nil, passed to the daemon as its descriptor gvisorinit.HostStatFD.
//
// It returns the pid of the sandbox process, which runsc writes to a
// file as it starts it: asking runsc state for it would start runsc
// once more, a tenth of a cold creation's time.
func (p *Provider) runContainer(ctx context.Context, cid, dir string, stat *os.File, networked bool) (int, error) {
	logf, err := os.OpenFile(filepath.Join(dir, daemonLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	pidFile := filepath.Join(dir, runscPid)
	args := []string{"run", "--detach", "--pid-file", pidFile, "--bundle", dir}
	if stat != nil {
		cmd0 := 3 // the first of cmd.ExtraFiles
		args = append(args, "--pass-fd", fmt.Sprintf("%d:%d", cmd0, gvisorinit.HostStatFD))
	}
	cmd := p.runscCmd(ctx, filepath.Join(dir, runscLog), networked, append(args, cid)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if stat != nil {
		cmd.ExtraFiles = []*os.File{stat}
	}
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("runsc run: %w%s", err, logTail(dir))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("runsc run: the sandbox's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("runsc run: the sandbox's pid: %q", b)
	}
	return pid, nil
}

// logTail is what the daemon and runsc last said about a container, for
// an error message.
func logTail(dir string) string {
	var s string
	for _, name := range []string{daemonLog, runscLog} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if len(b) > 1000 {
			b = b[len(b)-1000:]
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			s += "; " + name + ": " + t
		}
	}
	return s
}

// containerState is what runsc state says of a container.
type containerState struct {
	ID     string `json:"id"`
	PID    int    `json:"pid"`
	Status string `json:"status"`
}

func (p *Provider) state(ctx context.Context, cid string) (containerState, error) {
	var st containerState
	out, err := p.runsc(ctx, "state", cid)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("runsc state: %w", err)
	}
	return st, nil
}
