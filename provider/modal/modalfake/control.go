package modalfake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// Bounds of what a request may carry.
const (
	maxTags     = 64
	maxTagBytes = 256
	maxNameLen  = 64
)

// builderVersion is the image builder version the fake's environment
// names.
const builderVersion = "2024.10"

// control is the fake's modal.client.ModalClient.
type control struct {
	pb.UnimplementedModalClientServer
	s *Server
}

// sandbox is one sandbox the fake made.
type sandbox struct {
	id, taskID, appID, name, jwt string
	tags                         map[string]string
	created                      time.Time
	milliCPU, memoryMiB          int
	timeout                      time.Duration
	machine                      *remotefake.Machine
	tunnels                      []*tunnel
	timer                        *time.Timer
	// network is the outbound access asked for: kept and answered, not
	// enforced (the fake's machines have no network of their own).
	network *pb.NetworkAccess

	mu     sync.Mutex
	result *pb.GenericResult // once it has finished
	execs  map[string]*execution
}

func (sb *sandbox) finished() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.result != nil
}

func (c *control) AuthTokenGet(ctx context.Context, _ *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	return pb.AuthTokenGetResponse_builder{Token: c.s.authToken}.Build(), nil
}

func (c *control) EnvironmentGetOrCreate(ctx context.Context, req *pb.EnvironmentGetOrCreateRequest) (*pb.EnvironmentGetOrCreateResponse, error) {
	if n := req.GetDeploymentName(); n != "" && n != "main" {
		return nil, status.Errorf(codes.NotFound, "Environment '%s' not found", n)
	}
	return pb.EnvironmentGetOrCreateResponse_builder{
		EnvironmentId: c.s.envID,
		Metadata: pb.EnvironmentMetadata_builder{Name: "main",
			Settings: pb.EnvironmentSettings_builder{ImageBuilderVersion: builderVersion}.Build()}.Build(),
	}.Build(), nil
}

func (c *control) AppGetOrCreate(ctx context.Context, req *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	name := req.GetAppName()
	if name == "" || len(name) > maxNameLen {
		return nil, status.Error(codes.InvalidArgument, "invalid app name")
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[name]
	if a == nil {
		if req.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING {
			return nil, status.Errorf(codes.NotFound, "App '%s' not found", name)
		}
		a = &app{id: "ap-" + randomHex(11), name: name}
		s.apps[name] = a
	}
	return pb.AppGetOrCreateResponse_builder{AppId: a.id}.Build(), nil
}

func (c *control) ImageGetOrCreate(ctx context.Context, req *pb.ImageGetOrCreateRequest) (*pb.ImageGetOrCreateResponse, error) {
	s := c.s
	cmds := req.GetImage().GetDockerfileCommands()
	if len(cmds) == 0 || !strings.HasPrefix(cmds[0], "FROM ") {
		return nil, status.Error(codes.InvalidArgument, "an image's Dockerfile commands start with FROM")
	}
	if req.GetBuilderVersion() == "" {
		s.violation("ImageGetOrCreate: no builder version")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.appByID(req.GetAppId()) {
		return nil, status.Error(codes.NotFound, "app not found")
	}
	for _, b := range req.GetImage().GetBaseImages() {
		if _, ok := s.images[b.GetImageId()]; !ok {
			return nil, status.Errorf(codes.NotFound, "base image %s not found", b.GetImageId())
		}
	}
	id := "im-" + randomHex(11)
	s.images[id] = slices.Clone(cmds)
	return pb.ImageGetOrCreateResponse_builder{
		ImageId: id, Result: pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build(),
	}.Build(), nil
}

// appByID says whether an app has the id; s.mu is held.
func (s *Server) appByID(id string) bool {
	for _, a := range s.apps {
		if a.id == id {
			return true
		}
	}
	return false
}

func (c *control) SandboxCreateV2(ctx context.Context, req *pb.SandboxCreateV2Request) (*pb.SandboxCreateV2Response, error) {
	s := c.s
	def := req.GetDefinition()
	if def == nil {
		return nil, status.Error(codes.InvalidArgument, "no definition")
	}
	tags, err := tagMap(req.GetTags())
	if err != nil {
		return nil, err
	}
	if len(def.GetSecretIds()) > 0 || len(def.GetVolumeMounts()) > 0 || len(def.GetCloudBucketMounts()) > 0 || def.GetPtyInfo() != nil {
		s.violation("SandboxCreateV2: secrets by id, volumes, bucket mounts and PTYs are not the fake's")
		return nil, status.Error(codes.Unimplemented, "not supported by the fake")
	}
	var ports []int
	for _, p := range def.GetOpenPorts().GetPorts() {
		if p.GetUnencrypted() || p.GetTunnelType() != pb.TunnelType_TUNNEL_TYPE_UNSPECIFIED {
			s.violation("SandboxCreateV2: port %d: only encrypted HTTP/1 tunnels are the fake's", p.GetPort())
			return nil, status.Error(codes.Unimplemented, "not supported by the fake")
		}
		if p.GetPort() == 0 || p.GetPort() > 65535 {
			return nil, status.Errorf(codes.InvalidArgument, "invalid port %d", p.GetPort())
		}
		ports = append(ports, int(p.GetPort()))
	}
	timeout := def.GetTimeoutSecs()
	if timeout == 0 || timeout > 24*3600 {
		return nil, status.Errorf(codes.InvalidArgument, "timeout must be between 1 second and 24 hours, got %d seconds", timeout)
	}
	name := def.GetName()
	if len(name) > maxNameLen {
		return nil, status.Error(codes.InvalidArgument, "sandbox name too long")
	}
	res := def.GetResources()
	sb := &sandbox{
		id: "sb2-" + randomHex(12), taskID: "ta-" + randomHex(12), appID: req.GetAppId(), name: name,
		tags: tags, created: time.Now(), milliCPU: int(res.GetMilliCpu()), memoryMiB: int(res.GetMemoryMb()),
		timeout: time.Duration(timeout) * time.Second,
		execs:   map[string]*execution{},
		network: def.GetNetworkAccess(),
	}
	sb.jwt = jwt(time.Now().Add(time.Hour), sb.id)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "the fake is closed")
	}
	if !s.appByID(sb.appID) {
		s.mu.Unlock()
		return nil, status.Error(codes.NotFound, "app not found")
	}
	fromSnapshot := s.fsImage(def.GetImageId())
	if _, ok := s.images[def.GetImageId()]; !ok && fromSnapshot == nil {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "image %s not found", def.GetImageId())
	}
	running, cpu, mem := 0, 0, 0
	for _, o := range s.sandboxes {
		if o.finished() {
			continue
		}
		if name != "" && o.appID == sb.appID && o.name == name {
			s.mu.Unlock()
			return nil, status.Errorf(codes.AlreadyExists, "Sandbox with name '%s' already exists", name)
		}
		running, cpu, mem = running+1, cpu+o.milliCPU, mem+o.memoryMiB
	}
	q := s.opts.Quota
	if q.Sandboxes > 0 && running+1 > q.Sandboxes || q.MilliCPU > 0 && cpu+sb.milliCPU > q.MilliCPU || q.MemoryMiB > 0 && mem+sb.memoryMiB > q.MemoryMiB {
		s.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "workspace quota exceeded: at most %d sandboxes, %d milli-CPU and %d MiB of memory running", q.Sandboxes, q.MilliCPU, q.MemoryMiB)
	}
	// Reserved while the machine is made, so that a second call of the
	// name fails.
	s.sandboxes[sb.id] = sb
	s.tasks[sb.taskID] = sb
	s.mu.Unlock()

	env := map[string]string{"MODAL_SANDBOX_ID": sb.id, "MODAL_TASK_ID": sb.taskID}
	for _, src := range req.GetSecretSources() {
		if src.HasSecretId() {
			s.violation("SandboxCreateV2: a secret by id")
		}
		maps.Copy(env, src.GetEnv().GetContents())
	}
	m, err := s.opts.Farm.CreateWith(s.ctx, sb.id, remotefake.MachineOptions{Env: env})
	if err != nil {
		s.mu.Lock()
		delete(s.sandboxes, sb.id)
		delete(s.tasks, sb.taskID)
		s.mu.Unlock()
		return nil, status.Errorf(codes.Internal, "could not start the sandbox: %v", err)
	}
	if fromSnapshot != nil {
		if err := s.restore(ctx, m, fromSnapshot); err != nil {
			_ = m.Destroy(context.WithoutCancel(s.ctx))
			s.mu.Lock()
			delete(s.sandboxes, sb.id)
			delete(s.tasks, sb.taskID)
			s.mu.Unlock()
			return nil, status.Errorf(codes.Internal, "could not start the sandbox from image %s: %v", fromSnapshot.id, err)
		}
	}
	for _, p := range ports {
		t, err := s.openTunnel(sb, m, p)
		if err != nil {
			for _, t := range sb.tunnels {
				t.close()
			}
			_ = m.Destroy(context.WithoutCancel(s.ctx))
			s.mu.Lock()
			delete(s.sandboxes, sb.id)
			delete(s.tasks, sb.taskID)
			s.mu.Unlock()
			return nil, status.Errorf(codes.Internal, "tunnel: %v", err)
		}
		sb.tunnels = append(sb.tunnels, t)
	}
	sb.timer = time.AfterFunc(time.Duration(timeout)*time.Second, func() {
		s.finish(sb, pb.GenericResult_GENERIC_STATUS_TIMEOUT, "Sandbox timed out")
	})
	// Published once whole: calls about it see it from here on.
	s.mu.Lock()
	sb.machine = m
	closed := s.closed
	s.mu.Unlock()
	if closed {
		s.end(sb, "the fake closed")
		return nil, status.Error(codes.Unavailable, "the fake is closed")
	}
	return pb.SandboxCreateV2Response_builder{
		SandboxId: sb.id, TaskId: sb.taskID, Tunnels: tunnelData(sb),
		CommandRouterAccess: pb.CommandRouterAccess_builder{Jwt: sb.jwt, Url: s.RouterURL()}.Build(),
	}.Build(), nil
}

func tagMap(tags []*pb.SandboxTag) (map[string]string, error) {
	if len(tags) > maxTags {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d tags", maxTags)
	}
	m := map[string]string{}
	for _, t := range tags {
		if t.GetTagName() == "" || len(t.GetTagName()) > maxTagBytes || len(t.GetTagValue()) > maxTagBytes {
			return nil, status.Error(codes.InvalidArgument, "a tag's name must have 1 to 256 bytes, its value at most 256")
		}
		m[t.GetTagName()] = t.GetTagValue()
	}
	return m, nil
}

func tunnelData(sb *sandbox) []*pb.TunnelData {
	var out []*pb.TunnelData
	for _, t := range sb.tunnels {
		host, port := t.addr()
		out = append(out, pb.TunnelData_builder{Host: host, Port: uint32(port), ContainerPort: uint32(t.port)}.Build())
	}
	return out
}

// get is the sandbox of id, running or not.
func (s *Server) get(id string) (*sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil || sb.machine == nil {
		return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", id)
	}
	return sb, nil
}

func (c *control) SandboxGetFromNameV2(ctx context.Context, req *pb.SandboxGetFromNameRequest) (*pb.SandboxGetFromNameResponse, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[req.GetAppName()]
	if a == nil {
		return nil, status.Errorf(codes.NotFound, "App '%s' not found", req.GetAppName())
	}
	var found *sandbox
	for _, sb := range s.sandboxes {
		if sb.appID != a.id || sb.name != req.GetSandboxName() || sb.machine == nil {
			continue
		}
		if !sb.finished() {
			found = sb
			break
		}
		if req.GetIncludeTerminated() && (found == nil || sb.created.After(found.created)) {
			found = sb
		}
	}
	if found == nil {
		return nil, status.Errorf(codes.NotFound, "Sandbox with name '%s' not found", req.GetSandboxName())
	}
	return pb.SandboxGetFromNameResponse_builder{SandboxId: found.id}.Build(), nil
}

func (c *control) SandboxListV2(ctx context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	s := c.s
	want, err := tagMap(req.GetTags())
	if err != nil {
		return nil, err
	}
	if req.GetAppId() == "" {
		s.violation("SandboxListV2: no app id (listing the environment is deprecated)")
	}
	s.mu.Lock()
	var all []*sandbox
	for _, sb := range s.sandboxes {
		if sb.machine == nil || req.GetAppId() != "" && sb.appID != req.GetAppId() {
			continue
		}
		if !req.GetIncludeFinished() && sb.finished() {
			continue
		}
		if b := req.GetBeforeTimestamp(); b > 0 && !(stamp(sb.created) < b) {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && sb.tags[k] == v
		}
		if ok {
			all = append(all, sb)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b *sandbox) int { return b.created.Compare(a.created) })
	if len(all) > s.opts.PageSize {
		all = all[:s.opts.PageSize]
	}
	var infos []*pb.SandboxInfo
	for _, sb := range all {
		infos = append(infos, pb.SandboxInfo_builder{Id: sb.id, CreatedAt: stamp(sb.created), AppId: sb.appID, Name: sb.name, Tags: tagList(sb.tags)}.Build())
	}
	return pb.SandboxListResponse_builder{Sandboxes: infos}.Build(), nil
}

// stamp is t as Modal's timestamps say it: seconds, fractional.
func stamp(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

func tagList(m map[string]string) []*pb.SandboxTag {
	var out []*pb.SandboxTag
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, pb.SandboxTag_builder{TagName: k, TagValue: m[k]}.Build())
	}
	return out
}

func (c *control) SandboxTagsGetV2(ctx context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	sb, err := c.s.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	tags := tagList(sb.tags) // SandboxTagsSetV2 replaces them
	c.s.mu.Unlock()
	return pb.SandboxTagsGetResponse_builder{Tags: tags}.Build(), nil
}

func (c *control) SandboxTerminateV2(ctx context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	sb, err := c.s.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	existing := sb.result
	sb.mu.Unlock()
	c.s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, "Sandbox terminated")
	return pb.SandboxTerminateResponse_builder{ExistingResult: existing}.Build(), nil
}

func (c *control) SandboxGetTaskIdV2(ctx context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	sb, err := c.s.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.result != nil {
		return pb.SandboxGetTaskIdResponse_builder{TaskResult: sb.result}.Build(), nil
	}
	return pb.SandboxGetTaskIdResponse_builder{TaskId: proto.String(sb.taskID)}.Build(), nil
}

func (c *control) SandboxGetCommandRouterAccess(ctx context.Context, req *pb.SandboxGetCommandRouterAccessRequest) (*pb.SandboxGetCommandRouterAccessResponse, error) {
	sb, err := c.s.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if sb.finished() {
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox %s has finished", sb.id)
	}
	return pb.SandboxGetCommandRouterAccessResponse_builder{Jwt: sb.jwt, Url: c.s.RouterURL()}.Build(), nil
}

func (c *control) SandboxGetTunnelsV2(ctx context.Context, req *pb.SandboxGetTunnelsRequest) (*pb.SandboxGetTunnelsResponse, error) {
	sb, err := c.s.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if sb.finished() {
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox %s has finished", sb.id)
	}
	return pb.SandboxGetTunnelsResponse_builder{Tunnels: tunnelData(sb)}.Build(), nil
}

func (c *control) SandboxWaitV2(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	sb, err := c.s.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	wait := time.Duration(float64(req.GetTimeout()) * float64(time.Second))
	deadline := time.Now().Add(min(wait, 55*time.Second))
	for {
		sb.mu.Lock()
		r := sb.result
		sb.mu.Unlock()
		if r != nil || !time.Now().Before(deadline) {
			return pb.SandboxWaitResponse_builder{Result: r}.Build(), nil
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// EnvironmentList is not used by berth; the fake answers it so that a
// check of the token by it works.
func (c *control) EnvironmentList(ctx context.Context, _ *emptypb.Empty) (*pb.EnvironmentListResponse, error) {
	return pb.EnvironmentListResponse_builder{}.Build(), nil
}

// finish ends sb with a result: its processes and machine go, and its
// tunnels close; then the result is there, as Modal reports a sandbox
// finished once it has stopped.
func (s *Server) finish(sb *sandbox, st pb.GenericResult_GenericStatus, msg string) {
	s.stop(sb, msg)
	code := int32(0)
	if st == pb.GenericResult_GENERIC_STATUS_TERMINATED {
		code = 137
	}
	sb.mu.Lock()
	if sb.result == nil {
		sb.result = pb.GenericResult_builder{Status: st, Exception: msg, Exitcode: code}.Build()
	}
	sb.mu.Unlock()
}

// end ends sb as terminated, for a reason of the fake's.
func (s *Server) end(sb *sandbox, why string) {
	s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, why)
}

// stop removes sb's machine and tunnels.
func (s *Server) stop(sb *sandbox, why string) {
	if sb.timer != nil {
		sb.timer.Stop()
	}
	for _, t := range sb.tunnels {
		t.close()
	}
	s.mu.Lock()
	m := sb.machine
	s.mu.Unlock()
	if m != nil {
		if err := m.Destroy(context.WithoutCancel(s.ctx)); err != nil {
			s.log.Warn("modalfake: destroy a machine", "sandbox", sb.id, "err", err)
		}
	}
	s.log.Debug("modalfake: sandbox ended", "sandbox", sb.id, "why", why)
}

// Vanish loses sandbox id, as when Modal loses its worker: its machine
// and tunnels go, and every call about it answers NotFound.
func (s *Server) Vanish(id string) error {
	s.mu.Lock()
	sb := s.sandboxes[id]
	delete(s.sandboxes, id)
	if sb != nil {
		delete(s.tasks, sb.taskID)
	}
	s.mu.Unlock()
	if sb == nil {
		return fmt.Errorf("modalfake: no sandbox %s", id)
	}
	s.end(sb, "vanished")
	return nil
}

// Resources says what sandbox id asked for: its CPU in milli-cores, its
// memory in MiB, and its timeout.
// Network returns the outbound access a sandbox was made with: its
// type (OPEN, BLOCKED, ALLOWLIST; "" when none was asked) and its
// allow lists.
func (s *Server) Network(id string) (kind string, cidrs, domains []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil || sb.network == nil {
		return "", nil, nil
	}
	n := sb.network
	return strings.TrimPrefix(n.GetNetworkAccessType().String(), "NETWORK_ACCESS_TYPE_"), n.GetAllowedCidrs(), n.GetAllowedDomains()
}

func (s *Server) Resources(id string) (milliCPU, memoryMiB int, timeout time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return 0, 0, 0
	}
	return sb.milliCPU, sb.memoryMiB, sb.timeout
}
