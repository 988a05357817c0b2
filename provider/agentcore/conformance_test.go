package agentcore_test

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/agentcore"
	"github.com/berth-dev/berth/provider/agentcore/agentcorefake"
	"github.com/berth-dev/berth/provider/providertest"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// newFake starts a fake for one test, its API violations a failure.
func newFake(t *testing.T, opts agentcorefake.Options) *agentcorefake.Server {
	t.Helper()
	opts.Farm, opts.AccessKeyID, opts.SecretAccessKey = farm, testKeyID, testSecret
	f, err := agentcorefake.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			t.Errorf("AgentCore API violations:\n%s", strings.Join(v, "\n"))
		}
	})
	return f
}

// awsEnv gives the test process the fake's credentials, as the AWS
// default chain reads them, and nothing of the host's.
func awsEnv(t *testing.T) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", testKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", testRegion)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// settings are the provider's settings against f.
func settings(t *testing.T, f *agentcorefake.Server) provider.Config {
	t.Helper()
	awsEnv(t)
	t.Setenv(agentcore.DefaultSecretEnv, "the agentcore tests' secret")
	return provider.Config{"endpoint-url": f.URL(), "daemon": daemon}
}

func openProvider(t *testing.T, pc provider.Config) provider.Provider {
	t.Helper()
	p, err := provider.Open(t.Context(), agentcore.Name, pc)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConformance runs berth's provider suite over the registered
// agentcore provider (package remote over this package's API) against
// the fake: berth-sandboxd uploaded with writeFiles, started with
// startCommandExecution, and reached through the relay, one
// executeCommand per piece of each request. The pause is the daemon's.
func TestConformance(t *testing.T) {
	f := newFake(t, agentcorefake.Options{MaxSessions: 1000})
	pc := settings(t, f)
	h := remotetest.Harness(farm, func(t *testing.T) provider.Provider { return openProvider(t, pc) })
	// Each 1 MiB piece is an API call through the fake's HTTP server:
	// 128 MiB each way proves the streaming as 256 would, in half the
	// time.
	h.StreamSize = 128 << 20
	providertest.Run(t, h)
}
