package netns

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

// Bounds of the stub's answers.
const (
	dnsTimeout    = 2 * time.Second // a NetworkOpen lookup on the host
	dnsMaxAnswers = 8
	dnsTTL        = 5 // seconds: policies change under Update
)

// stub answers sandboxes' DNS questions from their policies.
type stub struct {
	udp, tcp *dns.Server
}

func (m *Manager) startStub() (*stub, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	var pc net.PacketConn
	var ln net.Listener
	addr := m.cfg.DNSAddr.String()
	err := In(m.uplink, func() error {
		var err error
		if pc, err = lc.ListenPacket(context.Background(), "udp4", addr); err != nil {
			return err
		}
		if ln, err = lc.Listen(context.Background(), "tcp4", addr); err != nil {
			pc.Close()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	h := dns.HandlerFunc(m.answer)
	s := &stub{
		udp: &dns.Server{PacketConn: pc, Handler: h},
		tcp: &dns.Server{Listener: ln, Handler: h, ReadTimeout: dnsTimeout, WriteTimeout: dnsTimeout,
			MaxTCPQueries: 16},
	}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() {
			if err := srv.ActivateAndServe(); err != nil {
				m.log.Debug("DNS stub stopped", "err", err)
			}
		}()
		<-started
	}
	return s, nil
}

func (s *stub) close() {
	s.udp.Shutdown()
	s.tcp.Shutdown()
}

// answer answers one question of a sandbox, whose policy its source
// address finds.
func (m *Manager) answer(w dns.ResponseWriter, q *dns.Msg) {
	r := new(dns.Msg)
	r.SetReply(q)
	r.RecursionAvailable = true
	defer w.WriteMsg(r)
	if len(q.Question) != 1 || q.Opcode != dns.OpcodeQuery {
		r.Rcode = dns.RcodeRefused
		return
	}
	policy, ok := m.policyOf(w.RemoteAddr())
	if !ok {
		r.Rcode = dns.RcodeRefused
		return
	}
	question := q.Question[0]
	name := strings.TrimSuffix(question.Name, ".")
	if question.Qclass != dns.ClassINET {
		r.Rcode = dns.RcodeRefused
		return
	}
	var addrs []netip.Addr
	switch policy.Mode {
	case provider.NetworkAllow:
		if !allowsName(policy, name) {
			r.Rcode = dns.RcodeNameError
			return
		}
		addrs = []netip.Addr{m.ServiceAddr()}
	case provider.NetworkOpen:
		ctx, cancel := context.WithTimeout(context.Background(), dnsTimeout)
		defer cancel()
		found, err := m.cfg.Resolver.LookupNetIP(ctx, "ip4", name)
		if err != nil {
			r.Rcode = dns.RcodeNameError
			if dnsErr, ok := err.(*net.DNSError); ok && !dnsErr.IsNotFound {
				r.Rcode = dns.RcodeServerFailure
			}
			return
		}
		addrs = found
	default:
		r.Rcode = dns.RcodeRefused
		return
	}
	if question.Qtype != dns.TypeA {
		return // no AAAA (IPv6 is off), nor anything else: an empty answer
	}
	for i, a := range addrs {
		if i == dnsMaxAnswers {
			break
		}
		if !a.Is4() {
			continue
		}
		r.Answer = append(r.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsTTL},
			A:   a.AsSlice(),
		})
	}
}

// policyOf finds the policy of the sandbox at addr, from StateDir, so
// that every Manager sharing it answers alike.
func (m *Manager) policyOf(addr net.Addr) (provider.Network, bool) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return provider.Network{}, false
	}
	slot := m.slotOf(ap.Addr().Unmap())
	if slot < 0 {
		return provider.Network{}, false
	}
	rec, err := m.readSlot(slot)
	if err != nil {
		return provider.Network{}, false
	}
	return rec.Policy, true
}

// allowsName reports whether a host rule of policy allows name on some
// port: which port the sandbox will dial, the proxy checks.
func allowsName(policy provider.Network, name string) bool {
	proxy, _ := ruleset{policy: policy}.ports()
	for _, p := range proxy {
		if policy.AllowsHost(name, p) {
			return true
		}
	}
	return false
}
