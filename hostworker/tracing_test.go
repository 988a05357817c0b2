package hostworker_test

import (
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/internal/testserver"
	"github.com/berth-dev/berth/sandbox"
)

// TestTracing: with tracing on in a client (berth.Dial, WithTracing)
// and in its worker (the SDK's interceptor, HostConfig.Tracer), a
// sandbox's creation and a command in it make one connected trace: the
// client's call, the workflow, the activity and the provider call, each
// span the child of the one before.
func TestTracing(t *testing.T) {
	ctx := t.Context()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)
	opts := testserver.Options(t)

	wopts := opts
	i, err := berth.TracingInterceptor(tp)
	if err != nil {
		t.Fatal(err)
	}
	wopts.Interceptors = []interceptor.ClientInterceptor{i}
	wc, err := client.Dial(wopts)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	h, err := hostworker.StartHost(ctx, wc, hostworker.HostConfig{DataDir: shortDataDir(t), Providers: []string{"linux"},
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	c, err := berth.Dial(ctx, opts, berth.WithTracing(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tctx, root := tp.Tracer("test").Start(ctx, "test")
	sb, err := c.Sandboxes().Create(tctx, berth.SandboxOptions{ID: "traced", Provider: "linux", IdleTimeout: berth.Never, HibernateAfter: berth.Never})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Stop(ctx)
	if res, err := sb.Exec(tctx, []string{"true"}, berth.ExecOptions{}); err != nil || !res.OK() {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	root.End()

	// Spans started, ended or not: the sandbox's workflow, and its span,
	// run on.
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	find := func(name string) sdktrace.ReadOnlySpan {
		for _, s := range rec.Started() {
			byID[s.SpanContext().SpanID()] = s
		}
		for _, s := range rec.Started() {
			if s.Name() == name {
				return s
			}
		}
		return nil
	}
	for _, tc := range []struct {
		provider string
		// The kinds of span from the provider's up to the test's, each
		// named by its prefix.
		want []string
	}{
		{"provider.create", []string{"provider.create", "RunActivity:Create", "StartActivity:Create", "RunWorkflow:berth.Sandbox", "StartWorkflow:berth.Sandbox", "test"}},
		{"provider.exec", []string{"provider.exec", "RunActivity:ExecLocal", "StartActivity:ExecLocal", "HandleUpdate:", "UpdateWorkflow:", "test"}},
	} {
		var span sdktrace.ReadOnlySpan
		testkit.Eventually(t, tc.provider+"'s span", 10*time.Second, func() bool { span = find(tc.provider); return span != nil })
		var chain []string
		for s := span; s != nil; s = byID[s.Parent().SpanID()] {
			if s.SpanContext().TraceID() != root.SpanContext().TraceID() {
				t.Errorf("%s is in trace %s, not the test's %s", s.Name(), s.SpanContext().TraceID(), root.SpanContext().TraceID())
			}
			chain = append(chain, s.Name())
			if !s.Parent().IsValid() {
				break
			}
		}
		t.Logf("%s's ancestry: %v", tc.provider, chain)
		at := 0
		for _, name := range chain {
			if at < len(tc.want) && strings.HasPrefix(name, tc.want[at]) {
				at++
			}
		}
		if at < len(tc.want) {
			t.Errorf("%s's ancestry: %v; want, in order, spans named %v", tc.provider, chain, tc.want)
		}
		if p := span.Attributes(); len(p) == 0 || string(p[0].Value.AsString()) != "linux" {
			t.Errorf("%s's attributes: %v, want berth.provider=linux", tc.provider, p)
		}
	}
}
