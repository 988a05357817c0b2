package modalfake

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"sync"
	"time"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// authority is the fake's CA, which signs the tunnels' certificate.
type authority struct {
	pem  []byte
	cert tls.Certificate // for 127.0.0.1, signed by the CA
}

func newAuthority() (*authority, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "modalfake test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	return &authority{
		pem:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}, nil
}

// tunnel is an encrypted port of a sandbox: a TLS listener on loopback
// whose connections go to the port of the sandbox's machine.
type tunnel struct {
	l    net.Listener
	port int // the sandbox's

	mu    sync.Mutex
	conns map[net.Conn]bool
	done  bool
}

// openTunnel starts the tunnel of port of sb.
func (s *Server) openTunnel(sb *sandbox, m *remotefake.Machine, port int) (*tunnel, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &tunnel{l: tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{s.ca.cert}, MinVersion: tls.VersionTLS12}),
		port: port, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := t.l.Accept()
			if err != nil {
				return
			}
			s.count("tunnel")
			go s.forward(sb, m, t, c)
		}
	}()
	return t, nil
}

// addr is the tunnel's host and port.
func (t *tunnel) addr() (string, int) {
	a := t.l.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

// forward copies c both ways to the tunnel's port in sb's machine.
func (s *Server) forward(sb *sandbox, m *remotefake.Machine, t *tunnel, c net.Conn) {
	if !t.track(c) {
		return
	}
	defer t.untrack(c)
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	in, err := m.Dial(ctx, t.port)
	cancel()
	if err != nil {
		s.log.Debug("modalfake: tunnel", "sandbox", sb.id, "port", t.port, "err", err)
		return
	}
	if !t.track(in) {
		return
	}
	defer t.untrack(in)
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(in, &slowReader{r: c, d: s.opts.Latency, count: func() { s.count("tunnel-read") }})
		closeWrite(in)
		done <- struct{}{}
	}()
	go func() { _, _ = io.Copy(c, in); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

func (t *tunnel) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		c.Close()
		return false
	}
	t.conns[c] = true
	return true
}

func (t *tunnel) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	c.Close()
}

// close stops the tunnel and every connection through it: one into a
// network namespace whose processes are gone would hang.
func (t *tunnel) close() {
	t.mu.Lock()
	t.done = true
	conns := t.conns
	t.conns = map[net.Conn]bool{}
	t.mu.Unlock()
	t.l.Close()
	for c := range conns {
		c.Close()
	}
}

// slowReader delays each read by d: a request through a tunnel takes
// Options.Latency more, as a call of the control plane does.
// Each read is counted: near enough a request through the tunnel, its
// round trip.
type slowReader struct {
	r     io.Reader
	d     time.Duration
	count func()
}

func (s *slowReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.count()
		time.Sleep(s.d)
	}
	return n, err
}
