package activities

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"gocloud.dev/blob"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/transfer"
)

// Activities are the sandbox activities of one worker. Register a value
// with a worker; its exported methods are the activities.
type Activities struct {
	// Providers are the providers this worker serves, by name.
	Providers map[string]provider.Provider
	// Unavailable are providers the worker's binary links but could not
	// open, for ProviderStatuses to tell.
	Unavailable []provider.Availability
	// Outputs is where whole command outputs go.
	Outputs *blob.Bucket
	// Snapshots is where workspace snapshots go; nil means this worker
	// cannot snapshot (nor hibernate, fork or recover) sandboxes.
	Snapshots *snapshot.Store
	// Client lets the reaper ask the server whether a sandbox's owner
	// workflow is still running.
	Client client.Client
	// GenericQueue is the queue every worker with a provider polls, and
	// HostQueue the one only this worker polls (this host's workers, when
	// it runs several). Each provider has a queue of its own besides, for
	// creation: see ProviderQueue.
	GenericQueue, HostQueue string
	// InlineCap is how much of each output stream results carry inline;
	// zero means transfer.DefaultInlineCap.
	InlineCap int
	// PartSize is the size of stored output parts; zero means
	// transfer.DefaultPartSize.
	PartSize int
	// Parked are the sandboxes this host paused as it last stopped; nil
	// means none.
	Parked *Parked
	// Metrics receives what the activities measure; nil measures
	// nothing.
	Metrics Metrics
	// Tracer makes a span around each provider call, under the
	// activity's own; nil traces nothing.
	Tracer trace.TracerProvider
	// Capacity bounds the sandboxes of the host-bound providers; nil
	// means no bound.
	Capacity *Capacity

	handoffs handoffs // commands ExecLocal handed to Exec
	handles  handles  // sandboxes commands ran in, for the next
}

func (a *Activities) provider(name string) (provider.Provider, error) {
	p, ok := a.Providers[name]
	if !ok {
		return nil, fmt.Errorf("%w: unknown provider %q (this worker serves %s)", errdefs.ErrBadInput, name, strings.Join(a.providerNames(), ", "))
	}
	return p, nil
}

// sandbox finds the sandbox ref names, resuming it first if its host
// paused it as it stopped: its workflow believes it running.
func (a *Activities) sandbox(ctx context.Context, ref refs.Sandbox) (provider.Sandbox, error) {
	sb, err := a.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := a.unpark(ctx, ref, sb); err != nil {
		return nil, err
	}
	return sb, nil
}

func (a *Activities) get(ctx context.Context, ref refs.Sandbox) (provider.Sandbox, error) {
	p, err := a.provider(ref.Provider)
	if err != nil {
		return nil, err
	}
	ctx, end := a.traceProvider(ctx, "get", ref.Provider, ref.ID)
	sb, err := p.Get(ctx, ref.ID)
	end(err)
	return sb, err
}

// CreateInput asks for a sandbox.
type CreateInput struct {
	Provider string        `json:"provider"`
	Spec     provider.Spec `json:"spec"`
	// Seen is the load placement read on this host, if it chose it by
	// load: the host refuses the creation when it holds more now (see
	// Seen).
	Seen *Seen `json:"seen,omitempty"`
}

// Create makes a sandbox, or finds the one a previous attempt made: the
// spec's id makes it idempotent.
func (a *Activities) Create(ctx context.Context, in CreateInput) (refs.Sandbox, error) {
	defer Heartbeat(ctx)()
	return returned(a.create(ctx, in))
}

func (a *Activities) create(ctx context.Context, in CreateInput) (refs.Sandbox, error) {
	// Checked before the provider sees it: a limit a sandbox cannot start
	// under fails there in ways that look transient.
	if err := provider.ValidateSpec(in.Spec); err != nil {
		return refs.Sandbox{}, err
	}
	p, err := a.provider(in.Provider)
	if err != nil {
		return refs.Sandbox{}, err
	}
	// Who owns what the sandbox stores (its outputs), for the reaper: it
	// goes some time after its owner (OutputRetention).
	if err := a.recordOwner(ctx, in.Spec.ID, in.Spec.Labels); err != nil {
		return refs.Sandbox{}, err
	}
	done, err := a.admit(p, in.Spec, in.Seen)
	if err != nil {
		return refs.Sandbox{}, err
	}
	start := time.Now()
	pctx, end := a.traceProvider(ctx, "create", in.Provider, in.Spec.ID)
	sb, err := p.Create(pctx, in.Spec)
	end(err)
	done(err == nil)
	if err != nil {
		return refs.Sandbox{}, err
	}
	a.metrics().Created(in.Provider, sb.ID(), time.Since(start))
	return a.refOf(ctx, in, p, sb), nil
}

// refOf is the reference of sb, made by p from in.
func (a *Activities) refOf(ctx context.Context, in CreateInput, p provider.Provider, sb provider.Sandbox) refs.Sandbox {
	// A host-bound sandbox's operations go to its host; the others' to
	// the queue this creation came from, whose workers serve its
	// provider.
	queue := a.GenericQueue
	if activity.IsActivity(ctx) {
		queue = activity.GetInfo(ctx).TaskQueue
	}
	if p.Capabilities().HostBound {
		queue = a.HostQueue
	}
	ref := refs.Sandbox{Provider: in.Provider, ID: sb.ID(), Queue: queue}
	lifetime := in.Spec.Lifetime
	if lifetime <= 0 {
		lifetime = provider.DefaultLifetime
	}
	if limit := p.Capabilities().MaxLifetime; limit > 0 && limit < lifetime {
		ref.MaxLifetime = limit
	}
	if _, ok := p.(provider.Waker); ok && p.Capabilities().Hibernate {
		ref.Hibernate = true
	}
	return ref
}

// Destroy destroys a sandbox; one that is already gone is not an error.
func (a *Activities) Destroy(ctx context.Context, ref refs.Sandbox) error {
	defer Heartbeat(ctx)()
	return toTemporal(a.destroy(ctx, ref))
}

func (a *Activities) destroy(ctx context.Context, ref refs.Sandbox) error {
	a.handles.forget(ref)
	// Not resumed first if its host parked it: a copy fenced while its
	// host was cut off, and superseded since, must not run again.
	sb, err := a.get(ctx, ref)
	if errdefs.KindOf(err) == errdefs.NotFound {
		a.metrics().Destroyed(ref.Provider, ref.ID)
		a.Capacity.forget(ref.Provider + "/" + ref.ID)
		return a.Parked.Remove(ParkedRef{Provider: ref.Provider, ID: ref.ID})
	}
	if err != nil {
		return err
	}
	ctx, end := a.traceProvider(ctx, "destroy", ref.Provider, ref.ID)
	err = sb.Destroy(ctx)
	end(err)
	if err != nil {
		return err
	}
	a.metrics().Destroyed(ref.Provider, ref.ID)
	a.Capacity.forget(ref.Provider + "/" + ref.ID)
	return a.Parked.Remove(ParkedRef{Provider: ref.Provider, ID: ref.ID})
}

// Info describes a sandbox.
func (a *Activities) Info(ctx context.Context, ref refs.Sandbox) (provider.Info, error) {
	return returned(a.info(ctx, ref))
}

func (a *Activities) info(ctx context.Context, ref refs.Sandbox) (provider.Info, error) {
	sb, err := a.sandbox(ctx, ref)
	if err != nil {
		return provider.Info{}, err
	}
	ctx, end := a.traceProvider(ctx, "info", ref.Provider, ref.ID)
	info, err := sb.Info(ctx)
	end(err)
	return info, err
}

// WriteFilesInput carries small files, inline.
type WriteFilesInput struct {
	Sandbox refs.Sandbox    `json:"sandbox"`
	Files   []provider.File `json:"files"`
}

// WriteFiles writes files; writing them again writes the same bytes.
func (a *Activities) WriteFiles(ctx context.Context, in WriteFilesInput) error {
	return toTemporal(a.writeFiles(ctx, in))
}

func (a *Activities) writeFiles(ctx context.Context, in WriteFilesInput) error {
	total := 0
	for _, f := range in.Files {
		total += len(f.Data)
	}
	if total > transfer.MaxInlineFiles {
		return fmt.Errorf("%w: %d bytes of files through workflow history; at most %d", errdefs.ErrBadInput, total, transfer.MaxInlineFiles)
	}
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return err
	}
	ctx, end := a.traceProvider(ctx, "write_files", in.Sandbox.Provider, in.Sandbox.ID)
	err = sb.WriteFiles(ctx, in.Files)
	end(err)
	return err
}

// PathInput names a path in a sandbox.
type PathInput struct {
	Sandbox refs.Sandbox `json:"sandbox"`
	Path    string       `json:"path"`
}

// ReadFileInput asks for a file; files larger than MaxInline bytes come
// back as their head and a reference to the whole.
type ReadFileInput struct {
	Sandbox   refs.Sandbox `json:"sandbox"`
	Path      string       `json:"path"`
	MaxInline int          `json:"max_inline,omitempty"` // zero means transfer.DefaultInlineCap
}

// ReadFile reads a file; a large one is stored whole in the blob store.
func (a *Activities) ReadFile(ctx context.Context, in ReadFileInput) (transfer.Output, error) {
	return returned(a.readFile(ctx, in))
}

func (a *Activities) readFile(ctx context.Context, in ReadFileInput) (_ transfer.Output, err error) {
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return transfer.Output{}, err
	}
	// The span covers the reading of the file too: the provider streams it.
	pctx, end := a.traceProvider(ctx, "read_file", in.Sandbox.Provider, in.Sandbox.ID)
	defer func() { end(err) }()
	rc, err := sb.ReadFile(pctx, in.Path)
	if err != nil {
		return transfer.Output{}, err
	}
	defer rc.Close()
	max := in.MaxInline
	if max <= 0 {
		max = transfer.DefaultInlineCap
	}
	head := make([]byte, max+1)
	n, err := io.ReadFull(rc, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return transfer.Output{}, err
	}
	if n <= max {
		return transfer.Output{Inline: head[:n], Size: int64(n), HeadLen: n}, nil
	}
	// The same key on every attempt: a retry overwrites, leaves nothing.
	key := transfer.Files + in.Sandbox.ID + "/" + attemptKey(ctx)
	w := transfer.NewPartWriter(ctx, a.Outputs, key, a.partSize(), 0)
	w.SetAsync(transfer.DefaultAsyncParts)
	size, err := copyBeating(ctx, w, io.MultiReader(bytes.NewReader(head[:n]), rc))
	if err == nil {
		err = w.Close()
	} else {
		w.Abort()
	}
	if err != nil {
		return transfer.Output{}, err
	}
	a.metrics().BlobWritten(BlobFile, size)
	return transfer.Output{Inline: head[:max], HeadLen: max, Size: size, Truncated: true, Blob: key, Parts: w.Parts()}, nil
}

// ListDir lists a directory.
func (a *Activities) ListDir(ctx context.Context, in PathInput) ([]provider.FileInfo, error) {
	return returned(a.listDir(ctx, in))
}

func (a *Activities) listDir(ctx context.Context, in PathInput) ([]provider.FileInfo, error) {
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, err
	}
	ctx, end := a.traceProvider(ctx, "list_dir", in.Sandbox.Provider, in.Sandbox.ID)
	infos, err := sb.ListDir(ctx, in.Path)
	end(err)
	return infos, err
}

// Remove removes a path.
func (a *Activities) Remove(ctx context.Context, in PathInput) error {
	return toTemporal(a.remove(ctx, in))
}

func (a *Activities) remove(ctx context.Context, in PathInput) error {
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return err
	}
	ctx, end := a.traceProvider(ctx, "remove", in.Sandbox.Provider, in.Sandbox.ID)
	err = sb.Remove(ctx, in.Path)
	end(err)
	return err
}

func (a *Activities) inlineCap() int {
	if a.InlineCap > 0 {
		return a.InlineCap
	}
	return transfer.DefaultInlineCap
}

func (a *Activities) partSize() int {
	if a.PartSize > 0 {
		return a.PartSize
	}
	return transfer.DefaultPartSize
}

// providerNames lists the providers in a stable order.
func (a *Activities) providerNames() []string {
	names := make([]string, 0, len(a.Providers))
	for name := range a.Providers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// ExportPath writes a file or directory of a sandbox's workspace as a
// tar stream into the blob store (see provider.PathExporter for its
// names), and says where. Retries write to the same place.
func (a *Activities) ExportPath(ctx context.Context, in PathInput) (transfer.Output, error) {
	return returned(a.exportPath(ctx, in))
}

func (a *Activities) exportPath(ctx context.Context, in PathInput) (_ transfer.Output, err error) {
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return transfer.Output{}, err
	}
	pe, ok := sb.(provider.PathExporter)
	if !ok {
		return transfer.Output{}, fmt.Errorf("%w: provider %q cannot export part of a workspace", errdefs.ErrUnsupported, in.Sandbox.Provider)
	}
	pctx, end := a.traceProvider(ctx, "export_path", in.Sandbox.Provider, in.Sandbox.ID)
	defer func() { end(err) }()
	rc, err := pe.ExportPath(pctx, in.Path)
	if err != nil {
		return transfer.Output{}, err
	}
	defer rc.Close()
	key := transfer.Exports + in.Sandbox.ID + "/" + attemptKey(ctx)
	w := transfer.NewPartWriter(ctx, a.Outputs, key, a.partSize(), 0)
	w.SetAsync(transfer.DefaultAsyncParts)
	size, err := copyBeating(ctx, w, rc)
	if err == nil {
		err = w.Close()
	} else {
		w.Abort()
	}
	if err != nil {
		return transfer.Output{}, fmt.Errorf("export %q: %w", in.Path, err)
	}
	a.metrics().BlobWritten(BlobExport, size)
	return transfer.Output{Size: size, Truncated: true, Blob: key, Parts: w.Parts()}, nil
}

// attemptKey names what an activity stores, the same on every attempt
// of it: a retry overwrites what the attempt before it stored.
func attemptKey(ctx context.Context) string {
	info := activity.GetInfo(ctx)
	return info.WorkflowExecution.RunID + "-" + info.ActivityID
}

// copyBeating copies src to dst, heartbeating as the bytes go: a copy of
// many gigabytes takes longer than a heartbeat timeout.
func copyBeating(ctx context.Context, dst io.Writer, src io.Reader) (int64, error) {
	var total int64
	buf := make([]byte, 256<<10)
	last := time.Now()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
			if time.Since(last) > heartbeatEvery {
				activity.RecordHeartbeat(ctx, total)
				last = time.Now()
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}

// Heartbeat heartbeats the activity of ctx every few seconds until stop
// is called: for activities, here and in other packages, whose work
// reports no progress of its own. Outside an activity it does nothing.
func Heartbeat(ctx context.Context) (stop func()) { return heartbeatLoop(ctx, nil) }

// heartbeatLoop heartbeats the activity of ctx every heartbeatEvery,
// with what details returns (nothing when it is nil), until stop is
// called; stop returns once the loop has ended. Outside an activity it
// does nothing.
func heartbeatLoop(ctx context.Context, details func() any) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(heartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if details == nil {
					activity.RecordHeartbeat(ctx)
				} else {
					activity.RecordHeartbeat(ctx, details())
				}
			}
		}
	}()
	return func() { close(done); <-exited }
}
