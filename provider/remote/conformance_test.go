package remote_test

import (
	"errors"
	"io/fs"
	"os"
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

// testSecret is every test provider's: providers opened one after
// another reach the same daemons, as a worker that restarts does.
var testSecret = []byte("the remote provider's tests' secret")

func open(t *testing.T, api remote.API) provider.Provider {
	t.Helper()
	return remote.New(api, remote.Config{DaemonPath: daemon, Secret: testSecret})
}

// machineOf is the farm's machine that serves sb.
func machineOf(t *testing.T, sb provider.Sandbox) *remotefake.Machine {
	t.Helper()
	rm, ok := sb.(interface{ Machine() remote.Machine })
	if !ok {
		t.Fatalf("not a remote sandbox: %T", sb)
	}
	m, err := farm.Machine(rm.Machine().ID)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// hostPIDs lists the processes of sb's machine on the host: none once
// the machine has ended.
func hostPIDs(t *testing.T, sb provider.Sandbox) []int {
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
	pids, err := m.HostPIDs()
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errdefs.ErrSandboxLost) {
		return nil // its first process has exited
	}
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// daemonPID finds the daemon among the machine's processes.
func daemonPID(t *testing.T, sb provider.Sandbox) int {
	t.Helper()
	for _, pid := range hostPIDs(t, sb) {
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

func TestConformance(t *testing.T) {
	api := remotefake.NewAPI(farm)
	providertest.Run(t, providertest.Harness{
		Open:      func(t *testing.T) provider.Provider { return open(t, api) },
		Processes: hostPIDs,
		DaemonRSS: func(t *testing.T, sb provider.Sandbox) int64 {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(daemonPID(t, sb)) + "/status")
			if err != nil {
				t.Fatal(err)
			}
			return sandboxtest.VmRSS(t, string(b))
		},
	})
}
