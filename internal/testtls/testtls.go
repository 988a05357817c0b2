// Package testtls makes self-signed certificates for tests that turn TLS
// on: a CA, a server certificate for 127.0.0.1 and localhost, and a
// client certificate, each in a PEM file.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the paths of the PEM files Make writes.
type Files struct {
	CA                    string // the CA that signed both certificates
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	// OtherCA signed nothing here: trusting it alone must fail.
	OtherCA string
}

// Make writes a fresh CA, server and client certificate into a
// temporary directory of the test.
func Make(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	f := Files{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		OtherCA: filepath.Join(dir, "other-ca.pem"),
	}
	ca, caKey := authority(t, "berth test CA", f.CA)
	authority(t, "another CA", f.OtherCA)
	leaf(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, f.ServerCert, f.ServerKey)
	leaf(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "berth client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, f.ClientCert, f.ClientKey)
	return f
}

var serial = big.NewInt(time.Now().UnixNano())

func authority(t testing.TB, name, certFile string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	key := newKey(t)
	der := sign(t, tmpl, tmpl, &key.PublicKey, key)
	write(t, certFile, "CERTIFICATE", der)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate, certFile, keyFile string) {
	t.Helper()
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key := newKey(t)
	write(t, certFile, "CERTIFICATE", sign(t, tmpl, ca, &key.PublicKey, caKey))
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write(t, keyFile, "PRIVATE KEY", der)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	serial.Add(serial, big.NewInt(1))
	tmpl.SerialNumber = new(big.Int).Set(serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func write(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
