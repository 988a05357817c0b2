package modalfake

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// fsImage is an image TaskSnapshotFilesystem made: the sandbox's
// filesystem beyond the farm's image, saved by its machine
// (remotefake.Machine.SaveFilesystem) to a file of the fake's.
type fsImage struct {
	id      string
	file    string
	size    int64
	uid     int       // of the machine's user, whose files they were
	expires time.Time // zero: never
}

// live says whether the image can still be used.
func (im *fsImage) live() bool { return im.expires.IsZero() || time.Now().Before(im.expires) }

// maxSnapshotTTL is the longest TTL the fake takes, in seconds.
const maxSnapshotTTL = 10 * 365 * 24 * 3600

// TaskSnapshotFilesystem saves the task's filesystem as an image, its
// TTL the request's (-1: none). A request of a snapshot id already
// taken (the SDK's retry) answers that image. The call's end (the
// SDK's timeout) stops the save.
func (r *router) TaskSnapshotFilesystem(ctx context.Context, req *pb.TaskSnapshotFilesystemRequest) (*pb.TaskSnapshotFilesystemResponse, error) {
	s := r.s
	sb, err := s.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if req.GetContainerId() != "" || len(req.GetCustomerSuppliedEncryptionKey()) > 0 {
		s.violation("TaskSnapshotFilesystem: sidecars and encryption keys are not the fake's")
		return nil, status.Error(codes.Unimplemented, "not supported by the fake")
	}
	if !req.HasTtlSeconds() {
		s.violation("TaskSnapshotFilesystem: no TTL (the SDK always sends one)")
	}
	ttl := req.GetTtlSeconds()
	if ttl == 0 || ttl < -1 || ttl > maxSnapshotTTL {
		return nil, status.Errorf(codes.InvalidArgument, "invalid TTL %d seconds", ttl)
	}
	key := req.GetSnapshotId()
	if key == "" || len(key) > 64 {
		return nil, status.Error(codes.InvalidArgument, "a snapshot needs an id")
	}
	s.mu.Lock()
	if id, ok := s.snapshotIDs[key]; ok {
		s.mu.Unlock()
		return pb.TaskSnapshotFilesystemResponse_builder{ImageId: id}.Build(), nil
	}
	s.mu.Unlock()

	im := &fsImage{id: "im-" + randomHex(11), uid: sb.machine.UID()}
	im.file = filepath.Join(filepath.Dir(s.caFile), im.id+".tar")
	f, err := os.OpenFile(im.file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "snapshot: %v", err)
	}
	im.size, err = sb.machine.SaveFilesystem(ctx, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(im.file)
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Internal, "snapshot of sandbox %s: %v", sb.id, err)
	}
	if ttl > 0 {
		im.expires = time.Now().Add(time.Duration(ttl) * time.Second)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		os.Remove(im.file)
		return nil, status.Error(codes.Unavailable, "the fake is closed")
	}
	s.fsImages[im.id] = im
	s.snapshotIDs[key] = im.id
	return pb.TaskSnapshotFilesystemResponse_builder{ImageId: im.id}.Build(), nil
}

// fsImage is the live snapshot image of id, or nil when id names none
// (or one that has expired or was deleted); s.mu is held.
func (s *Server) fsImage(id string) *fsImage {
	if im := s.fsImages[id]; im != nil && im.live() {
		return im
	}
	return nil
}

func (c *control) ImageFromId(ctx context.Context, req *pb.ImageFromIdRequest) (*pb.ImageFromIdResponse, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	id := req.GetImageId()
	if _, ok := s.images[id]; !ok && s.fsImage(id) == nil {
		return nil, status.Errorf(codes.NotFound, "Image %s not found", id)
	}
	return pb.ImageFromIdResponse_builder{ImageId: id}.Build(), nil
}

func (c *control) ImageDelete(ctx context.Context, req *pb.ImageDeleteRequest) (*emptypb.Empty, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	id := req.GetImageId()
	if im := s.fsImages[id]; im != nil {
		delete(s.fsImages, id)
		os.Remove(im.file)
		return &emptypb.Empty{}, nil
	}
	if _, ok := s.images[id]; ok {
		delete(s.images, id)
		return &emptypb.Empty{}, nil
	}
	return nil, status.Errorf(codes.NotFound, "Image %s not found", id)
}

func (c *control) SandboxTagsSetV2(ctx context.Context, req *pb.SandboxTagsSetRequest) (*emptypb.Empty, error) {
	sb, err := c.s.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	tags, err := tagMap(req.GetTags())
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	sb.tags = tags
	c.s.mu.Unlock()
	return &emptypb.Empty{}, nil
}

// restore fills machine m, just made, from snapshot image im.
func (s *Server) restore(ctx context.Context, m *remotefake.Machine, im *fsImage) error {
	f, err := os.Open(im.file)
	if err != nil {
		return fmt.Errorf("image %s: %w", im.id, err)
	}
	defer f.Close()
	return m.RestoreFilesystem(ctx, f, im.uid)
}

// ExpireImage makes the snapshot image id expire now, as its TTL would:
// it is no longer found, nor can a sandbox be made from it.
func (s *Server) ExpireImage(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	im := s.fsImages[id]
	if im == nil {
		return fmt.Errorf("modalfake: no snapshot image %s", id)
	}
	im.expires = time.Now().Add(-time.Second)
	return nil
}

// SnapshotImages lists the live snapshot images' ids.
func (s *Server) SnapshotImages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, im := range s.fsImages {
		if im.live() {
			ids = append(ids, id)
		}
	}
	return ids
}
