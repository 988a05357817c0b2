package devserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/internal/testtls"
)

// TestTLS serves the frontend over TLS, then mutual TLS: a client that
// trusts the CA (and, for mTLS, presents a certificate) runs a workflow
// through a worker over TLS; one without TLS, trusting another CA, or
// without a client certificate under mTLS, is refused.
func TestTLS(t *testing.T) {
	t.Parallel()
	certs := testtls.Make(t)
	for _, mutual := range []bool{false, true} {
		name := "tls"
		if mutual {
			name = "mtls"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts := &devserver.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, RootCAFile: certs.CA}
			if mutual {
				opts.ClientCAFile, opts.ClientCertFile, opts.ClientKeyFile = certs.CA, certs.ClientCert, certs.ClientKey
			}
			srv, err := devserver.Start(t.Context(), devserver.Options{
				DataDir: t.TempDir(), Address: "127.0.0.1:0", Logger: testLogger(), TLS: opts,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Stop() })

			good := srv.ClientOptions()
			if good.ConnectionOptions.TLS == nil {
				t.Fatal("ClientOptions has no TLS")
			}
			c := dial(t, good)
			tq := newTaskQueue()
			startWorker(t, c, tq)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, greetWorkflow, "tls")
			if err != nil {
				t.Fatal(err)
			}
			var got string
			if err := run.Get(ctx, &got); err != nil || got != "hello, tls" {
				t.Fatalf("workflow over TLS: %q, %v", got, err)
			}

			refused := map[string]*tls.Config{
				"plain":      nil,
				"other CA":   {RootCAs: pool(t, certs.OtherCA)},
				"wrong name": {RootCAs: pool(t, certs.CA), ServerName: "example.com"},
			}
			if mutual {
				refused["no client certificate"] = &tls.Config{RootCAs: pool(t, certs.CA)}
			}
			for what, cfg := range refused {
				o := srv.ClientOptions()
				o.ConnectionOptions.TLS = cfg
				if err := reach(t, o); err == nil {
					t.Errorf("%s: the server answered a client it should refuse", what)
				}
			}
		})
	}
}

// reach asks the server for its namespace, failing fast.
func reach(t *testing.T, o client.Options) error {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	o.Logger = sdklog.NewStructuredLogger(testLogger())
	c, err := client.DialContext(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: o.Namespace})
	return err
}

func pool(t *testing.T, file string) *x509.CertPool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatalf("%s: no certificate", file)
	}
	return p
}

// TestTLSRejectsBadOptions: incomplete TLS settings fail Start at once.
func TestTLSRejectsBadOptions(t *testing.T) {
	certs := testtls.Make(t)
	for _, tt := range []struct {
		tls  devserver.TLS
		want string
	}{
		{devserver.TLS{CertFile: certs.ServerCert, RootCAFile: certs.CA}, "needs CertFile, KeyFile and RootCAFile"},
		{devserver.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, RootCAFile: certs.CA, ClientCAFile: certs.CA}, "needs ClientCertFile"},
		{devserver.TLS{CertFile: certs.ServerCert, KeyFile: certs.ClientKey, RootCAFile: certs.CA}, "TLS certificate"},
		{devserver.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, RootCAFile: certs.ServerKey}, "no PEM certificate"},
	} {
		srv, err := devserver.Start(t.Context(), devserver.Options{DataDir: t.TempDir(), Address: "127.0.0.1:0", TLS: &tt.tls})
		if err == nil {
			_ = srv.Stop()
			t.Errorf("%+v: started", tt.tls)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v, want one line with %q", tt.tls, err, tt.want)
		}
	}
}
