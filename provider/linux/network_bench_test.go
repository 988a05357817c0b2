package linux

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/egress"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
)

// egressDownload is the size of BenchmarkEgress's download.
const egressDownload = 100 << 20

// download fetches a URL inside the sandbox and prints the bytes read.
const download = `
import sys, urllib.request
n = 0
with urllib.request.urlopen(sys.argv[1], timeout=30) as r:
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        n += len(b)
print(n)
`

// BenchmarkEgress downloads 100 MiB from the topology's pypi.org server
// inside a linux sandbox: by name, through the egress proxy (with its
// bandwidth bound off, to measure the relay), and by address, which a
// CIDR rule lets through the kernel's forwarding alone.
//
//	go test -run x -bench Egress -count 6 ./provider/linux | benchstat -
func BenchmarkEgress(b *testing.B) {
	tp := nettest.New(b)
	proxy, addr := startEgress(b, tp, egressPort, func(c *egress.Config) { c.Bandwidth = egress.Unlimited })
	p, err := New(Config{StateDir: shortTempDir(b), DaemonPath: os.Getenv("BERTH_TEST_DAEMON"),
		Network: NetworkConfig{ProxyAddr: addr, Uplink: tp.Uplink, Resolver: tp.Resolver(), Egress: proxy}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { destroyAll(b, p) })
	sb := sandboxtest.Create(b, p, provider.Spec{ID: "egress-bench", Network: provider.Network{Mode: provider.NetworkAllow,
		Hosts: []string{"pypi.org"}, CIDRs: []string{nettest.PyPIAddr.String()}, Ports: []uint16{nettest.HTTPPort}}})
	for _, c := range []struct{ name, host string }{{"proxy", "pypi.org"}, {"direct", nettest.PyPIAddr.String()}} {
		url := fmt.Sprintf("http://%s/bytes/%d", c.host, egressDownload)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(egressDownload)
			for b.Loop() {
				var out, errOut strings.Builder
				res, err := sb.Exec(b.Context(), provider.ExecRequest{Argv: []string{"/usr/bin/python3", "-c", download, url}, Stdout: &out, Stderr: &errOut})
				if err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != fmt.Sprint(egressDownload) {
					b.Fatalf("download %s: exit %d, %v, %q; %s", url, res.ExitCode, err, out.String(), errOut.String())
				}
			}
		})
	}
	if s := proxy.Stats(); s.Accepted == 0 {
		b.Error("no download went through the proxy")
	}
}
