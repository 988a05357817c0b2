package sandbox

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
)

// WithNetwork sets what the sandbox may reach beyond its loopback (see
// provider.Network). The zero policy, loopback only, is the default. A
// provider that cannot enforce the policy refuses the sandbox with
// errdefs.ErrUnsupported.
func WithNetwork(n provider.Network) Option { return func(c *config) { c.Spec.Network = n } }

// Network is the sandbox's network policy.
func (s *Sandbox) Network() provider.Network { return s.st.Config.Spec.Network }

// SetNetwork replaces the sandbox's network policy. A sandbox that
// exists (running or paused) has it changed in place, for its new
// connections, where its provider can (provider.NetworkUpdater); where
// it cannot, SetNetwork fails with errdefs.ErrUnsupported and the policy
// stays as it was: hibernate the sandbox first, and it wakes under the
// new one. A hibernated or lost sandbox takes the policy when it is next
// created. Recovery, hibernation, switch and fork keep the policy.
func (s *Sandbox) SetNetwork(ctx workflow.Context, n provider.Network) error {
	if err := n.Validate(); err != nil {
		return err
	}
	return s.transition(ctx, func(ctx workflow.Context) error {
		switch s.st.State {
		case StateStopped:
			return fmt.Errorf("%w: sandbox %s is stopped", errdefs.ErrNotFound, s.st.Ref.ID)
		case StateRunning, StatePaused:
			_, err := call[struct{}](ctx, s.opts(s.st.Ref.Queue, 0), acts.UpdateNetwork,
				activities.NetworkInput{Sandbox: s.st.Ref, Network: n})
			if err != nil {
				return s.markLost(ctx, err)
			}
		default:
			// Nothing to change now, but a policy its provider cannot
			// enforce would leave the sandbox unable to wake.
			queue, err := s.createQueue(ctx, s.st.Config.Provider)
			if err != nil {
				return err
			}
			_, err = call[struct{}](ctx, s.opts(queue, 0), acts.UpdateNetwork,
				activities.NetworkInput{Sandbox: refs.Sandbox{Provider: s.st.Config.Provider}, Network: n})
			if err != nil {
				return err
			}
		}
		s.st.Config.Spec.Network = n
		return nil
	})
}
