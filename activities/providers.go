package activities

import (
	"context"

	"github.com/berth-dev/berth/provider"
)

// ProviderStatuses describes the providers this worker serves and those
// its binary links but could not open.
func (a *Activities) ProviderStatuses(context.Context) ([]provider.Availability, error) {
	var out []provider.Availability
	for _, name := range a.providerNames() {
		p := a.Providers[name]
		caps := p.Capabilities()
		st := provider.Availability{Name: name, Host: a.HostQueue, Available: true, Capabilities: &caps}
		if r, ok := p.(provider.Reporter); ok {
			st.Note = r.Report()
		}
		out = append(out, st)
	}
	for _, u := range a.Unavailable {
		if _, served := a.Providers[u.Name]; !served {
			u.Host = a.HostQueue
			out = append(out, u)
		}
	}
	return out, nil
}
