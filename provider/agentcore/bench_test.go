package agentcore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	ac "github.com/aws/aws-sdk-go-v2/service/bedrockagentcore"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore/types"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/agentcore"
	"github.com/berth-dev/berth/provider/agentcore/agentcorefake"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// benchLatency is what the fake adds to every request, as a hosted
// service far from the worker would.
const benchLatency = 50 * time.Millisecond

// BenchmarkExec compares a command run through berth's agentcore
// provider (package remote over this package's API: berth-sandboxd in
// the session, reached through the relay, one executeCommand per call)
// with the one call the service's own SDK makes for it (executeCommand
// of the command itself), on one session of a fake whose every request
// takes benchLatency more. The round trips each takes are counted by
// the fake: per exec, and, for berth, per create and per file write;
// berth-renew is the floor of a call to the daemon.
func BenchmarkExec(b *testing.B) {
	ctx := context.Background()
	f, err := agentcorefake.New(ctx, agentcorefake.Options{Farm: farm, AccessKeyID: testKeyID, SecretAccessKey: testSecret, Latency: benchLatency})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			b.Errorf("AgentCore API violations:\n%s", strings.Join(v, "\n"))
		}
	}()
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": testKeyID, "AWS_SECRET_ACCESS_KEY": testSecret, "AWS_REGION": testRegion,
		"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true"} {
		b.Setenv(k, v)
	}
	api, err := agentcore.New(ctx, agentcore.Config{EndpointURL: f.URL()})
	if err != nil {
		b.Fatal(err)
	}
	p := remote.New(api, remote.Config{DaemonPath: daemon, Secret: []byte("the agentcore benchmark's secret")})

	start := f.AllRequests()
	sb, err := p.Create(ctx, provider.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	createTrips := f.AllRequests() - start
	defer sb.Destroy(ctx)
	start = f.AllRequests()
	if err := sb.WriteFile(ctx, "f", strings.NewReader("some text"), 0); err != nil {
		b.Fatal(err)
	}
	writeTrips := f.AllRequests() - start

	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		b.Fatal(err)
	}
	c := ac.NewFromConfig(cfg, func(o *ac.Options) { o.BaseEndpoint = aws.String(f.URL()) })
	session := sb.(interface{ Machine() remote.Machine }).Machine().ID

	remotetest.BenchDaemon(b, ctx, sb, f.AllRequests, createTrips, writeTrips)
	b.Run("direct", func(b *testing.B) {
		start := f.AllRequests()
		for b.Loop() {
			out, err := c.InvokeCodeInterpreter(ctx, &ac.InvokeCodeInterpreterInput{
				CodeInterpreterIdentifier: aws.String(agentcore.DefaultIdentifier), SessionId: &session,
				Name: types.ToolNameExecuteCommand, Arguments: &types.ToolArguments{Command: aws.String("true")},
			})
			if err != nil {
				b.Fatal(err)
			}
			ok := false
			for ev := range out.GetStream().Events() {
				if r, is := ev.(*types.CodeInterpreterStreamOutputMemberResult); is && r.Value.StructuredContent != nil {
					ok = aws.ToInt32(r.Value.StructuredContent.ExitCode) == 0
				}
			}
			out.GetStream().Close()
			if !ok {
				b.Fatal("executeCommand true did not exit 0")
			}
		}
		b.ReportMetric(float64(f.AllRequests()-start)/float64(b.N), "trips/exec")
	})
}
