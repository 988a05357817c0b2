package activities

import (
	"context"

	"github.com/berth-dev/berth/provider"
)

// ProviderStatuses describes the providers this worker serves and those
// its binary links but could not open.
func (a *Activities) ProviderStatuses(context.Context) ([]provider.Status, error) {
	var out []provider.Status
	for _, name := range a.providerNames() {
		caps := a.Providers[name].Capabilities()
		out = append(out, provider.Status{Name: name, Host: a.HostQueue, Available: true, Capabilities: &caps})
	}
	for _, u := range a.Unavailable {
		if _, served := a.Providers[u.Name]; !served {
			u.Host = a.HostQueue
			out = append(out, u)
		}
	}
	return out, nil
}
