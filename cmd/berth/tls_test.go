package main

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/internal/testtls"
)

// TestTLSConnection runs berth against the embedded server with mutual
// TLS: a worker configured by TEMPORAL_TLS_* variables, and clients by
// --tls-* flags or by the variables, create a sandbox and run a command
// in it. A client without the CA, or without its certificate, fails in
// one line with berth's own exit code.
func TestTLSConnection(t *testing.T) {
	berth, data := build(t), dataDir(t)
	certs := testtls.Make(t)
	var log testkit.SyncBuffer
	srv, err := devserver.Start(t.Context(), devserver.Options{
		DataDir: filepath.Join(data, "temporal"), Address: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
		TLS: &devserver.TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, RootCAFile: certs.CA,
			ClientCAFile: certs.CA, ClientCertFile: certs.ClientCert, ClientKeyFile: certs.ClientKey},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	dumpOnFailure(t, "server", &log)
	addr := srv.Address()

	t.Run("refused", func(t *testing.T) {
		for what, args := range map[string][]string{
			"plain":                 {"--address", addr},
			"without the CA":        {"--address", addr, "--tls", "--tls-cert-path", certs.ClientCert, "--tls-key-path", certs.ClientKey},
			"another CA":            {"--address", addr, "--tls-ca-path", certs.OtherCA, "--tls-cert-path", certs.ClientCert, "--tls-key-path", certs.ClientKey},
			"no client certificate": {"--address", addr, "--tls-ca-path", certs.CA},
		} {
			out, errOut, code := runBerth(t, berth, append([]string{"sandbox", "ls"}, args...)...)
			t.Logf("%s: %s", what, strings.TrimSpace(errOut))
			if code != exitBerth || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "cannot reach the Temporal server at "+addr) ||
				strings.Contains(errOut, "TLS?") != (what == "plain") {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want 125 and one line", what, code, out, errOut)
			}
		}
	})

	// The worker takes its settings from the environment.
	t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", certs.CA)
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", certs.ClientCert)
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", certs.ClientKey)
	startWorker(t, berth, addr, data, "worker")

	t.Run("environment", func(t *testing.T) {
		t.Setenv("TEMPORAL_ADDRESS", addr)
		out, errOut, code := runBerth(t, berth, "run", "--", "echo", "over tls")
		if code != 0 || out != "over tls\n" {
			t.Errorf("run with TEMPORAL_TLS_*: exit %d, %q, %q", code, out, errOut)
		}
	})
	// Flags only: clear the variables.
	for _, v := range []string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH"} {
		t.Setenv(v, "")
	}
	flags := []string{"--address", addr, "--tls-ca-path", certs.CA, "--tls-cert-path", certs.ClientCert, "--tls-key-path", certs.ClientKey}
	out, errOut, code := runBerth(t, berth, append([]string{"sandbox", "create"}, flags...)...)
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create over mTLS: exit %d, %q, %q", code, out, errOut)
	}
	out, errOut, code = runBerth(t, berth, append(append([]string{"sandbox", "exec", id}, flags...), "--", "sh", "-c", "echo hi; exit 7")...)
	if code != 7 || out != "hi\n" {
		t.Errorf("exec over mTLS: exit %d, %q, %q", code, out, errOut)
	}
	if out, errOut, code := runBerth(t, berth, append([]string{"sandbox", "rm", id}, flags...)...); code != 0 {
		t.Errorf("rm over mTLS: exit %d, %q, %q", code, out, errOut)
	}
}
