package sandbox

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/refs"
)

// Snapshot saves the workspace as a user snapshot, kept until deleted,
// and returns its id: give it to FromSnapshot to make new sandboxes from
// it, on this provider or another. The bytes go to the snapshot store;
// only the id enters history.
func (s *Sandbox) Snapshot(ctx workflow.Context) (string, error) {
	var info activities.SnapshotInfo
	err := s.do(ctx, "", func(refs.Sandbox) (err error) {
		info, err = s.snapshot(ctx, SnapshotUser)
		return err
	})
	return info.ID, err
}

// ForkSnapshot saves the workspace for a sandbox that another workflow,
// owner, makes from it with FromCheckpoint. The snapshot is labelled as
// owner's, so that it is garbage-collected when owner is done with it.
func (s *Sandbox) ForkSnapshot(ctx workflow.Context, owner string) (string, error) {
	var info activities.SnapshotInfo
	err := s.do(ctx, "", func(refs.Sandbox) (err error) {
		info, err = s.snapshotFor(ctx, SnapshotCheckpoint, owner)
		return err
	})
	return info.ID, err
}

// Fork makes a new, independent sandbox whose workspace is a copy of
// this one's, with the same settings (resources, environment, labels,
// lifetime, idle and hibernation), on p when given, else on the same
// provider. The caller stops it.
func (s *Sandbox) Fork(ctx workflow.Context, p ...Provider) (*Sandbox, error) {
	to := Provider{}
	if len(p) > 0 {
		to = p[0]
	}
	return s.ForkWith(ctx, to)
}

// ForkWith is Fork with settings changed: opts, those of New, apply over
// this sandbox's; p.Type empty means the same provider, p.Image empty
// the same image.
func (s *Sandbox) ForkWith(ctx workflow.Context, p Provider, opts ...Option) (*Sandbox, error) {
	if p.Name == "" {
		p.Name = s.st.Config.Provider
	}
	cfg := s.st.Config
	cfg.Provider = p.Name
	if p.Image != "" {
		cfg.Spec.Image = p.Image
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("fork sandbox %s: %w", s.st.Ref.ID, err)
	}
	var info activities.SnapshotInfo
	err := s.do(ctx, "", func(refs.Sandbox) (err error) {
		info, err = s.snapshot(ctx, SnapshotCheckpoint)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fork sandbox %s: %w", s.st.Ref.ID, err)
	}
	fork, err := New(ctx, p, func(c *config) {
		*c = cfg
		c.FromSnapshot, c.OwnSnapshot = info.ID, true
	})
	if err != nil {
		s.deleteSnapshot(ctx, info.ID)
		return nil, fmt.Errorf("fork sandbox %s: %w", s.st.Ref.ID, err)
	}
	return fork, nil
}

// Switch moves the sandbox to provider p (with p.Image, or the
// provider's default image when p.Image is empty: an image chosen for
// one provider is not carried to the next): its workspace is copied to a new sandbox
// there and the old one is destroyed. The handle stays the same; running
// processes do not survive the move. When the new sandbox cannot be
// made, the old one is kept.
func (s *Sandbox) Switch(ctx workflow.Context, p Provider) error {
	// Brought back to running first (resumed, woken or recovered), then
	// moved as a transition of its own, not as an operation in flight.
	if err := s.begin(ctx); err != nil {
		return err
	}
	s.st.inflight--
	err := s.transition(ctx, func(ctx workflow.Context) error {
		image := p.Image
		if image == "" && workflow.GetVersion(ctx, switchDefaultImageVersion, workflow.DefaultVersion, 1) != 1 {
			image = s.st.Config.Spec.Image
		}
		return s.moveTo(ctx, p.Name, image)
	})
	if err != nil {
		return fmt.Errorf("switch sandbox to %s: %w", p.Name, err)
	}
	return nil
}

// moveTo copies the workspace to a new sandbox on provider prov, made
// from image, and destroys the old one; it runs as a transition. When
// the new sandbox cannot be made, the old one is kept.
func (s *Sandbox) moveTo(ctx workflow.Context, prov, image string) error {
	old, oldImage := s.st.Ref, s.st.Config.Spec.Image
	s.st.Config.Spec.Image = image
	var created *creation
	overlap := workflow.GetVersion(ctx, switchOverlapVersion, workflow.DefaultVersion, 1) == 1
	if overlap {
		// The new sandbox is made while the workspace is saved:
		// on another provider, neither waits for the other.
		c := s.create(ctx, prov, s.nextID())
		if c.queue == "" { // no worker serves prov: nothing to save for
			s.st.Config.Spec.Image = oldImage
			return c.made.Get(ctx, nil)
		}
		created = &c
	}
	if err := s.checkpoint(ctx); err != nil {
		s.st.Config.Spec.Image = oldImage
		if created != nil {
			s.discard(ctx, *created)
		}
		return err
	}
	if created == nil {
		c := s.create(ctx, prov, s.nextID())
		created = &c
	}
	ref, err := s.fill(ctx, *created)
	if err != nil {
		s.st.Config.Spec.Image = oldImage
		return err
	}
	s.st.Ref, s.st.Config.Provider = ref, prov
	s.set(ctx, StateRunning)
	if overlap {
		s.leaveBehind(ctx, old)
	} else {
		s.destroy(ctx, old)
	}
	return nil
}

// switchOverlapVersion marks the histories in which Switch creates the
// new sandbox while the checkpoint is taken, not after it, and returns
// without waiting for the old one's destruction.
const switchOverlapVersion = "switch-create-during-checkpoint"

// switchDefaultImageVersion marks the histories in which a switch
// without an image goes to the provider's default image, rather than
// keeping the one the sandbox had.
const switchDefaultImageVersion = "switch-default-image"

// leaveBehind destroys a sandbox the handle no longer uses without
// making the caller wait for it: a container's removal can take longer
// than the rest of a switch. Stop waits for it, and the handle is Busy
// (not to be carried across continue-as-new) until it is done.
func (s *Sandbox) leaveBehind(ctx workflow.Context, ref refs.Sandbox) {
	s.st.behind++
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, func(ctx workflow.Context) {
		defer func() { s.st.behind-- }()
		s.destroy(ctx, ref)
	})
}

// discard destroys the sandbox create started, once it is made; a
// creation that failed left nothing to destroy.
func (s *Sandbox) discard(ctx workflow.Context, c creation) {
	if c.queue == "" {
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if made, err := result[refs.Sandbox](dctx, c.made, c.queue); err == nil {
		s.destroy(dctx, made)
	}
}

func (s *Sandbox) deleteSnapshot(ctx workflow.Context, id string) {
	_, err := call[struct{}](ctx, s.opts(s.st.Config.Queue, 0), acts.DeleteSnapshot, id)
	if err != nil {
		workflow.GetLogger(ctx).Warn("delete snapshot", "snapshot", id, "error", err)
	}
}
