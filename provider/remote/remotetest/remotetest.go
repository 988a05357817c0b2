// Package remotetest holds what the tests of hosted providers share: the
// daemon they upload, and the conformance suite's harness over machines
// of a remotefake.Farm.
package remotetest

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
	"github.com/berth-dev/berth/provider/providertest"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// BuildDaemon builds berth-sandboxd, static and stripped as a release
// is, into dir, and returns its path.
func BuildDaemon(dir string) (string, error) {
	daemon := filepath.Join(dir, "berth-sandboxd")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", daemon, "github.com/berth-dev/berth/cmd/berth-sandboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", errors.New("build berth-sandboxd: " + err.Error() + "\n" + string(out))
	}
	return daemon, nil
}

// MachineOf is the farm's machine that serves sb, or nil once the
// service has ended it.
func MachineOf(t testing.TB, farm *remotefake.Farm, sb provider.Sandbox) *remotefake.Machine {
	t.Helper()
	rm, ok := sb.(interface{ Machine() remote.Machine })
	if !ok {
		t.Fatalf("not a remote sandbox: %T", sb)
	}
	m, err := farm.Machine(rm.Machine().ID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Processes lists the processes of sb's machine on the host: none once
// the machine has ended.
func Processes(t testing.TB, farm *remotefake.Farm, sb provider.Sandbox) []int {
	t.Helper()
	m := MachineOf(t, farm, sb)
	if m == nil {
		return nil
	}
	pids, err := m.HostPIDs()
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errdefs.ErrSandboxLost) || errors.Is(err, errdefs.ErrNotFound) {
		return nil // its first process has exited
	}
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// DaemonPID finds the daemon among the processes of sb's machine.
func DaemonPID(t testing.TB, farm *remotefake.Farm, sb provider.Sandbox) int {
	t.Helper()
	for _, pid := range Processes(t, farm, sb) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if len(argv) > 1 && strings.HasSuffix(argv[0], "berth-sandboxd") && argv[1] == "serve" {
			return pid
		}
	}
	t.Fatal("no daemon among the machine's processes")
	return 0
}

// MachinesSuite names the run of the conformance suite that holds
// remotefake's machines to providertest.MachineGroups: the fakes of
// hosted services give it as their Harness.MachinesHeldBy.
const MachinesSuite = "provider/remote's TestConformance"

// Harness is the conformance suite's harness for a hosted provider whose
// machines the farm makes.
func Harness(farm *remotefake.Farm, open func(t *testing.T) provider.Provider) providertest.Harness {
	return providertest.Harness{
		Open: open,
		Processes: func(t *testing.T, sb provider.Sandbox) []int {
			return Processes(t, farm, sb)
		},
		DaemonRSS: func(t *testing.T, sb provider.Sandbox) int64 {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(DaemonPID(t, farm, sb)) + "/status")
			if err != nil {
				t.Fatal(err)
			}
			return sandboxtest.VmRSS(t, string(b))
		},
	}
}
