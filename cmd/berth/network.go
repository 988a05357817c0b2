package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/berth-dev/berth"
)

// networkFlags are the flags that set a network policy: --network and
// the rules of an allow policy.
type networkFlags struct {
	mode         string
	hosts, cidrs []string
	ports        []string
}

func (nf *networkFlags) register(f *pflag.FlagSet) {
	f.StringVar(&nf.mode, "network", "", "what the sandbox may reach: none (loopback only, the default), allow (the --allow-* rules), open, or a preset: registries (the package registries, over HTTPS)")
	f.StringSliceVar(&nf.hosts, "allow-host", nil, "under --network allow, hosts it may reach: pypi.org, *.npmjs.org (below it), git.example.com:22 (repeatable, or comma-separated)")
	f.StringSliceVar(&nf.cidrs, "allow-cidr", nil, "under --network allow, address ranges it may reach: 203.0.113.0/24, 2001:db8::1 (repeatable, or comma-separated)")
	f.StringSliceVar(&nf.ports, "allow-port", nil, "under --network allow, the ports its rules reach (default 80,443)")
}

// changed says whether any of the flags was given.
func (nf *networkFlags) changed() bool {
	return nf.mode != "" || len(nf.hosts)+len(nf.cidrs)+len(nf.ports) > 0
}

// policy is the policy the flags set. Rules without --network mean
// allow; a preset takes the rules given beside it too.
func (nf *networkFlags) policy() (berth.Network, error) {
	var n berth.Network
	rules := len(nf.hosts)+len(nf.cidrs)+len(nf.ports) > 0
	switch nf.mode {
	case "", string(berth.NetworkAllow):
		if rules {
			n.Mode = berth.NetworkAllow
		} else if nf.mode != "" {
			return n, fmt.Errorf("--network allow needs --allow-host or --allow-cidr")
		}
	case "none":
	case string(berth.NetworkOpen):
		n.Mode = berth.NetworkOpen
	default:
		preset, ok := berth.NetworkPreset(nf.mode)
		if !ok {
			return n, fmt.Errorf("--network %q: none, allow, open or registries", nf.mode)
		}
		n = preset
	}
	if rules && n.Mode != berth.NetworkAllow {
		return n, fmt.Errorf("--allow-host, --allow-cidr and --allow-port need --network allow (or a preset)")
	}
	n.Hosts = append(n.Hosts, nf.hosts...)
	n.CIDRs = append(n.CIDRs, nf.cidrs...)
	if len(nf.ports) > 0 {
		n.Ports = nil // the flags' ports replace a preset's
	}
	for _, p := range nf.ports {
		port, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
		if err != nil || port == 0 {
			return n, fmt.Errorf("--allow-port %q: a port from 1 to 65535", p)
		}
		n.Ports = append(n.Ports, uint16(port))
	}
	if err := n.Validate(); err != nil {
		return n, err
	}
	return n, nil
}

// describeNetwork is a policy in one line, for inspect.
func describeNetwork(n berth.Network) string {
	switch n.Mode {
	case berth.NetworkNone:
		return "none"
	case berth.NetworkOpen:
		return "open"
	}
	var b strings.Builder
	b.WriteString("allow")
	if len(n.Hosts) > 0 {
		b.WriteString(" hosts=" + strings.Join(n.Hosts, ","))
	}
	if len(n.CIDRs) > 0 {
		b.WriteString(" cidrs=" + strings.Join(n.CIDRs, ","))
	}
	if len(n.Ports) > 0 {
		ports := make([]string, len(n.Ports))
		for i, p := range n.Ports {
			ports[i] = strconv.Itoa(int(p))
		}
		b.WriteString(" ports=" + strings.Join(ports, ","))
	}
	return b.String()
}

func newSandboxNetwork(cf *connFlags) *cobra.Command {
	var nf networkFlags
	cmd := &cobra.Command{
		Use:   "network ID --network none|allow|open|registries [--allow-host H]... [--allow-cidr C]...",
		Short: "Change a running sandbox's network policy (its new connections follow it at once)",
		Long: `berth sandbox network replaces a sandbox's network policy as a whole. The
sandbox's new connections follow it at once; a provider that cannot change a
running sandbox's policy says so, and the policy stays: hibernate the sandbox
first, and it wakes under the new one. Fork, switch and hibernation keep it.`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeSandboxes(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !nf.changed() {
				return usageError{fmt.Errorf("sandbox network: --network is required")}
			}
			n, err := nf.policy()
			if err != nil {
				return usageError{err}
			}
			c, err := cf.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			return update(cmd.Context(), c, args[0], opNetwork, func(s *berth.Sandbox, ctx context.Context) error {
				return s.SetNetwork(ctx, n)
			})
		},
	}
	nf.register(cmd.Flags())
	return cmd
}
