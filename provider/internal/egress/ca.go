package egress

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"
)

const (
	// caValidity is how long an authority the proxy makes is valid.
	// Sandboxes trust it for as long as they live, across restarts of
	// the host when it is kept in a file (Config.CAFile).
	caValidity = 5 * 365 * 24 * time.Hour
	// caRenewBefore is how long before its end a kept authority is
	// replaced by a new one, when the proxy starts.
	caRenewBefore = 30 * 24 * time.Hour
	// maxCAFileBytes bounds the authority's file.
	maxCAFileBytes = 64 << 10
)

// authority is the proxy's certificate authority, which signs the
// certificates of the hosts whose HTTPS the proxy terminates to add a
// credential.
type authority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	leafKey *ecdsa.PrivateKey // one key for every host's certificate
	pem     []byte            // the certificate

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

func newAuthority(now time.Time) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: authority key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "berth egress proxy", Organization: []string{"berth"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress: authority certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress: authority certificate: %w", err)
	}
	return withLeafKey(cert, key)
}

// withLeafKey is the authority of cert and key, with a new key for the
// hosts' certificates (which live in memory only).
func withLeafKey(cert *x509.Certificate, key crypto.Signer) (*authority, error) {
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: host key: %w", err)
	}
	return &authority{
		cert: cert, key: key, leafKey: leafKey,
		pem:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		leaves: map[string]*tls.Certificate{},
	}, nil
}

// errRenew is why a kept authority is replaced: it ends soon or ended.
var errRenew = errors.New("the authority ends soon")

// openAuthority is the authority kept at path: read if the file is
// there, made and written (mode 0600, atomically) if it is not or if
// it ends within caRenewBefore. "" is an authority in memory only. A
// file that others may read or write, or that is not an authority, is
// refused (errdefs.ErrBadInput), never replaced.
func openAuthority(path string, now time.Time, log *slog.Logger) (*authority, error) {
	if path == "" {
		return newAuthority(now)
	}
	a, err := readAuthority(path, now)
	switch {
	case err == nil:
		return a, nil
	case errors.Is(err, errRenew):
		log.Warn("egress: the proxy's authority ends soon: making a new one; sandboxes made before trust the old one only",
			"file", path, "not_after", a.cert.NotAfter)
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, err
	}
	made, err := newAuthority(now)
	if err != nil {
		return nil, err
	}
	won, err := writeAuthority(path, made, a != nil)
	if err != nil {
		return nil, fmt.Errorf("egress: authority file %s: %w", path, err)
	}
	if !won { // another process made it first: use theirs
		return readAuthority(path, now)
	}
	return made, nil
}

// readAuthority reads the authority at path. It returns the authority
// with errRenew when it ends within caRenewBefore.
func readAuthority(path string, now time.Time) (*authority, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: egress: authority file %s: %s", errdefs.ErrBadInput, path, fmt.Sprintf(format, args...))
	}
	lfi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, bad("%v", errors.Unwrap(err))
	}
	if !lfi.Mode().IsRegular() {
		return nil, bad("not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, bad("%v", errors.Unwrap(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !os.SameFile(lfi, fi) {
		return nil, bad("changed while read")
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, bad("mode %04o: it holds a private key and must be 0600 or stricter", perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCAFileBytes+1))
	if err != nil {
		return nil, bad("%v", err)
	}
	if len(b) > maxCAFileBytes {
		return nil, bad("over %d bytes", maxCAFileBytes)
	}
	var certDER, keyDER []byte
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				return nil, bad("not PEM")
			}
			break
		}
		switch {
		case blk.Type == "CERTIFICATE" && certDER == nil:
			certDER = blk.Bytes
		case blk.Type == "PRIVATE KEY" && keyDER == nil:
			keyDER = blk.Bytes
		default:
			return nil, bad("a %q block beside one CERTIFICATE and one PRIVATE KEY", blk.Type)
		}
	}
	if certDER == nil || keyDER == nil {
		return nil, bad("want one CERTIFICATE and one PRIVATE KEY (PEM)")
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, bad("the certificate: %v", err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, bad("the certificate is not a certificate authority's")
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, bad("the key: %v", err)
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, bad("the key cannot sign")
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, bad("the key is not the certificate's")
	}
	a, err := withLeafKey(cert, key)
	if err != nil {
		return nil, err
	}
	if cert.NotAfter.Sub(now) < caRenewBefore {
		return a, errRenew
	}
	return a, nil
}

// writeAuthority writes a to path through a temporary file of mode
// 0600 in its directory (made 0700 if missing): renamed over the old
// file when replace, else linked, so that of two processes making the
// file at once one wins and the other reports it lost (false).
func writeAuthority(path string, a *authority, replace bool) (bool, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(a.key)
	if err != nil {
		return false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(dir, ".ca-*.tmp") // made 0600
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	data := append(append([]byte(nil), a.pem...), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	if replace {
		err = os.Rename(tmp.Name(), path)
	} else if err = os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the new name survives a crash
		d.Close()
	}
	return true, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// leaf returns a certificate for name, from the cache while more than a
// third of its life is left.
func (a *authority) leaf(name string, now time.Time) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.leaves[name]; ok && c.Leaf.NotAfter.Sub(now) > leafValidity/3 {
		return c, nil
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     minTime(now.Add(leafValidity), a.cert.NotAfter),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &a.leafKey.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("egress: certificate for %q: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress: certificate for %q: %w", name, err)
	}
	if len(a.leaves) >= maxLeaves {
		clear(a.leaves)
	}
	c := &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: a.leafKey, Leaf: leaf}
	a.leaves[name] = c
	return c, nil
}

// CACertPEM is the proxy's certificate authority, PEM-encoded, for the
// sandboxes to trust: it signs the certificates the proxy presents for
// the hosts it adds credentials to.
func (p *Proxy) CACertPEM() []byte { return append([]byte(nil), p.ca.pem...) }

// CACert is the proxy's certificate authority.
func (p *Proxy) CACert() *x509.Certificate { return p.ca.cert }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
