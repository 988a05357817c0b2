package otlpenv

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// setenv sets the test's environment: only m of the variables read.
func setenv(t *testing.T, m map[string]string) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
		"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME"} {
		t.Setenv(k, m[k])
	}
}

// TestOff: without an endpoint, or with the SDK disabled, there is no
// tracer provider; a protocol or an exporter berth does not have is a
// one-line error naming the variable.
func TestOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		err  string
	}{
		{"unset", nil, ""},
		{"disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}, ""},
		{"exporter-none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"}, ""},
		{"bad-protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"bad-exporter", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setenv(t, tc.env)
			tp, stop, err := TracerProvider(t.Context(), "test")
			if stop == nil {
				t.Fatal("no stop function")
			}
			switch {
			case tc.err == "" && (err != nil || tp != nil):
				t.Errorf("got %v, %v; want no tracing, no error", tp, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n")):
				t.Errorf("error %v; want one line naming %s", err, tc.err)
			}
		})
	}
}

// TestExports: with an endpoint set, spans reach it by OTLP/HTTP when
// the provider stops, named by OTEL_SERVICE_NAME.
func TestExports(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
		body  []byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		paths, body = append(paths, r.URL.Path), append(body, b...)
		mu.Unlock()
	}))
	defer srv.Close()
	setenv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_SERVICE_NAME": "berth-test-service"})
	tp, stop, err := TracerProvider(t.Context(), "test")
	if err != nil || tp == nil {
		t.Fatalf("%v, %v", tp, err)
	}
	_, span := tp.Tracer("t").Start(t.Context(), "the-span")
	span.End()
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/v1/traces" || !strings.Contains(string(body), "the-span") || !strings.Contains(string(body), "berth-test-service") {
		t.Errorf("the collector got %v: %q", paths, body)
	}
}
