package remote_test

import (
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/providertest"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// testSecret is every test provider's: providers opened one after
// another reach the same daemons, as a worker that restarts does.
var testSecret = []byte("the remote provider's tests' secret")

func open(t *testing.T, api remote.API) provider.Provider {
	t.Helper()
	return remote.New(api, remote.Config{DaemonPath: daemon, Secret: testSecret})
}

func machineOf(t *testing.T, sb provider.Sandbox) *remotefake.Machine {
	t.Helper()
	m := remotetest.MachineOf(t, farm, sb)
	if m == nil {
		t.Fatal("the sandbox's machine is gone")
	}
	return m
}

func daemonPID(t *testing.T, sb provider.Sandbox) int { return remotetest.DaemonPID(t, farm, sb) }

func TestConformance(t *testing.T) {
	api := remotefake.NewAPI(farm)
	providertest.Run(t, remotetest.Harness(farm, func(t *testing.T) provider.Provider { return open(t, api) }))
}
