package devserver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"go.temporal.io/server/common/config"
)

// TLS serves the frontend over TLS, as a real cluster does, so that
// clients' TLS settings can be tried against a dev server. Files are
// PEM. History, matching and the internal worker stay on loopback
// without it.
type TLS struct {
	// CertFile and KeyFile are the frontend's certificate and key; the
	// certificate must name the host clients dial (an IP SAN for an IP).
	CertFile, KeyFile string
	// RootCAFile is the CA that signed CertFile, which the server's own
	// clients (its internal worker, Start's readiness check, the Web UI)
	// verify the frontend with.
	RootCAFile string
	// ClientCAFile, when set, turns on mutual TLS: a client must present
	// a certificate this CA signed.
	ClientCAFile string
	// ClientCertFile and ClientKeyFile are the certificate the server's
	// own clients present under mutual TLS; required with ClientCAFile.
	ClientCertFile, ClientKeyFile string
}

func (t *TLS) check() error {
	if t.CertFile == "" || t.KeyFile == "" || t.RootCAFile == "" {
		return errors.New("devserver: Options.TLS needs CertFile, KeyFile and RootCAFile")
	}
	if t.ClientCAFile != "" && (t.ClientCertFile == "" || t.ClientKeyFile == "") {
		return errors.New("devserver: Options.TLS.ClientCAFile (mutual TLS) needs ClientCertFile and ClientKeyFile for the server's own clients")
	}
	// Fail here, in one line, rather than deep in the server's start.
	if _, err := t.clientConfig(); err != nil {
		return err
	}
	if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
		return fmt.Errorf("devserver: TLS certificate: %w", err)
	}
	return nil
}

// apply turns TLS on in the server's configuration.
func (t *TLS) apply(c *config.Config) {
	c.Global.TLS.Frontend.Server = config.ServerTLS{CertFile: t.CertFile, KeyFile: t.KeyFile}
	if t.ClientCAFile != "" {
		c.Global.TLS.Frontend.Server.ClientCAFiles = []string{t.ClientCAFile}
		c.Global.TLS.Frontend.Server.RequireClientAuth = true
	}
	c.Global.TLS.Frontend.Client = config.ClientTLS{RootCAFiles: []string{t.RootCAFile}}
	// The internal worker reaches the frontend as a client (PublicClient).
	cert, key := t.CertFile, t.KeyFile
	if t.ClientCertFile != "" {
		cert, key = t.ClientCertFile, t.ClientKeyFile
	}
	c.Global.TLS.SystemWorker = config.WorkerTLS{CertFile: cert, KeyFile: key,
		Client: config.ClientTLS{RootCAFiles: []string{t.RootCAFile}}}
}

// clientConfig is what the server's own clients dial the frontend with.
func (t *TLS) clientConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(t.RootCAFile)
	if err != nil {
		return nil, fmt.Errorf("devserver: TLS root CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("devserver: TLS root CA %s: no PEM certificate", t.RootCAFile)
	}
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if t.ClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("devserver: TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// uiTLS is how the Web UI reaches the frontend.
func (s *Server) uiTLS() uiconfig.TLS {
	if s.tls == nil {
		return uiconfig.TLS{}
	}
	return uiconfig.TLS{CaFile: s.tls.RootCAFile, CertFile: s.tls.ClientCertFile, KeyFile: s.tls.ClientKeyFile,
		EnableHostVerification: true}
}
