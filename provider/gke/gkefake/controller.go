package gkefake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// RuntimeDir is the runtime's directory in every machine, as the example
// runtime's /app.
const RuntimeDir = "/app"

// startController watches claims and Sandboxes as the controllers do,
// and looks at expiry every Tick.
func (s *Server) startController() error {
	claims, err := s.ext.Tracker().Watch(claimsGVR, "")
	if err != nil {
		return err
	}
	boxes, err := s.agents.Tracker().Watch(sandboxesGVR, "")
	if err != nil {
		claims.Stop()
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer claims.Stop()
		defer boxes.Stop()
		tick := time.NewTicker(s.opts.Tick)
		defer tick.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case ev := <-claims.ResultChan():
				c, ok := ev.Object.(*extv1beta1.SandboxClaim)
				if !ok {
					continue
				}
				switch ev.Type {
				case watch.Added:
					s.goReconcile(c.DeepCopy())
				case watch.Deleted:
					s.claimDeleted(c)
				}
			case ev := <-boxes.ResultChan():
				if sb, ok := ev.Object.(*sandboxv1beta1.Sandbox); ok && ev.Type == watch.Deleted {
					s.endMachine(sb.Namespace, sb.Name)
				}
			case <-tick.C:
				s.expire()
			}
		}
	}()
	return nil
}

func (s *Server) goReconcile(c *extv1beta1.SandboxClaim) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.reconcile(c); err != nil && s.ctx.Err() == nil {
			s.log.Info("gkefake: claim", "claim", c.Name, "err", err)
		}
	}()
}

// reconcile makes claim c's Sandbox, cold, from its pool's template, and
// its pod's machine, and marks both Ready.
func (s *Server) reconcile(c *extv1beta1.SandboxClaim) error {
	ns := c.Namespace
	obj, err := s.ext.Tracker().Get(warmpoolsGVR, ns, c.Spec.WarmPoolRef.Name)
	if err != nil {
		s.setClaimReady(ns, c.Name, "", nil, false, "WarmPoolNotFound", fmt.Sprintf("SandboxWarmPool %q not found", c.Spec.WarmPoolRef.Name))
		return err
	}
	pool := obj.(*extv1beta1.SandboxWarmPool)
	if err := validatePodMetadata(c.Spec.AdditionalPodMetadata); err != nil {
		s.setClaimReady(ns, c.Name, "", nil, false, "InvalidMetadata", "invalid additionalPodMetadata: "+err.Error())
		return err
	}
	obj, err = s.ext.Tracker().Get(templatesGVR, ns, pool.Spec.TemplateRef.Name)
	if err != nil {
		s.setClaimReady(ns, c.Name, "", nil, false, "TemplateNotFound", fmt.Sprintf("SandboxTemplate %q not found", pool.Spec.TemplateRef.Name))
		return err
	}
	tmpl := obj.(*extv1beta1.SandboxTemplate)

	sb := &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.Name, Namespace: ns,
			UID:               newUIDType(),
			CreationTimestamp: metaNow(),
			Generation:        1,
			Annotations:       map[string]string{sandboxv1beta1.SandboxTemplateRefAnnotation: tmpl.Name},
			Labels: map[string]string{
				extv1beta1.SandboxIDLabel:             string(c.UID),
				sandboxv1beta1.SandboxLaunchTypeLabel: sandboxv1beta1.SandboxLaunchTypeCold,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: claimsGVR.GroupVersion().String(), Kind: "SandboxClaim",
				Name: c.Name, UID: c.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
	}
	if v := c.Labels[sandboxv1beta1.CreatedByLabel]; v != "" {
		sb.Labels[sandboxv1beta1.CreatedByLabel] = v
	}
	sb.Spec.SandboxBlueprint = *tmpl.Spec.SandboxBlueprint.DeepCopy()
	pl := maps.Clone(sb.Spec.PodTemplate.ObjectMeta.Labels)
	if pl == nil {
		pl = map[string]string{}
	}
	maps.Copy(pl, c.Spec.AdditionalPodMetadata.Labels)
	pl[extv1beta1.SandboxIDLabel] = string(c.UID)
	sb.Spec.PodTemplate.ObjectMeta.Labels = pl
	pa := maps.Clone(sb.Spec.PodTemplate.ObjectMeta.Annotations)
	if pa == nil {
		pa = map[string]string{}
	}
	maps.Copy(pa, c.Spec.AdditionalPodMetadata.Annotations)
	sb.Spec.PodTemplate.ObjectMeta.Annotations = pa
	s.stamp(sb)
	if err := s.agents.Tracker().Create(sandboxesGVR, sb, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	s.setClaimReady(ns, c.Name, sb.Name, nil, false, "SandboxNotReady", "Sandbox is not ready")

	m, err := s.opts.Farm.CreateWith(s.ctx, string(sb.UID), remotefake.MachineOptions{})
	if err != nil {
		s.setSandboxReady(ns, sb.Name, false, "PodFailed")
		return err
	}
	if p, err := m.Start(s.ctx, remotefake.Command{Argv: []string{"mkdir", "-p", RuntimeDir}}); err == nil {
		_, _ = p.Wait()
	}
	for in, host := range s.opts.ImageFiles {
		if err := copyIn(s.ctx, m, in, host); err != nil {
			_ = m.Destroy(context.WithoutCancel(s.ctx))
			s.setSandboxReady(ns, sb.Name, false, "PodFailed")
			return err
		}
	}
	s.mu.Lock()
	s.machines[machineKey(ns, sb.Name)] = m
	s.mu.Unlock()
	// The Sandbox may have gone while its pod was made.
	if _, err := s.agents.Tracker().Get(sandboxesGVR, ns, sb.Name); err != nil {
		s.endMachine(ns, sb.Name)
		return err
	}
	select {
	case <-s.ctx.Done():
		return s.ctx.Err()
	case <-time.After(s.opts.ReadyDelay):
	}
	s.setSandboxReady(ns, sb.Name, true, sandboxv1beta1.SandboxReasonDependenciesReady)
	s.setClaimReady(ns, c.Name, sb.Name, []string{podIP(sb.UID)}, true, sandboxv1beta1.SandboxReasonDependenciesReady, "Sandbox is ready")
	return nil
}

// podIP is the address the fake gives sb's pod, as a cluster's pod
// network would. Nothing ever dials it: the router routes by name.
func podIP(uid types.UID) string {
	b := []byte(uid)
	return fmt.Sprintf("10.244.%d.%d", b[0]%250+1, b[1]%250+1)
}

// setSandboxReady writes the Sandbox's status as the sandbox controller
// does: its service, pod IPs, selector and Ready condition.
func (s *Server) setSandboxReady(ns, name string, ready bool, reason string) {
	obj, err := s.agents.Tracker().Get(sandboxesGVR, ns, name)
	if err != nil {
		return
	}
	sb := obj.(*sandboxv1beta1.Sandbox)
	status := metav1.ConditionFalse
	msg := "Pod is not ready"
	if ready {
		status, msg = metav1.ConditionTrue, "Pod is Ready; Service Exists"
		sb.Status.Service = name
		sb.Status.ServiceFQDN = name + "." + ns + ".svc.cluster.local"
		sb.Status.PodIPs = []string{podIP(sb.UID)}
		sb.Status.LabelSelector = extv1beta1.SandboxIDLabel + "=" + sb.Labels[extv1beta1.SandboxIDLabel]
		sb.Status.NodeName = "gkefake-node"
	} else {
		sb.Status.PodIPs = nil
	}
	apimeta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{
		Type: string(sandboxv1beta1.SandboxConditionReady), Status: status, Reason: reason, Message: msg,
		ObservedGeneration: sb.Generation, LastTransitionTime: metaNow(),
	})
	s.stamp(sb)
	_ = s.agents.Tracker().Update(sandboxesGVR, sb, ns)
}

// setClaimReady writes the claim's status as the claim controller does.
func (s *Server) setClaimReady(ns, name, sandbox string, ips []string, ready bool, reason, msg string) {
	obj, err := s.ext.Tracker().Get(claimsGVR, ns, name)
	if err != nil {
		return
	}
	c := obj.(*extv1beta1.SandboxClaim)
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	c.Status.SandboxStatus.Name = sandbox
	c.Status.SandboxStatus.PodIPs = ips
	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: string(sandboxv1beta1.SandboxConditionReady), Status: status, Reason: reason, Message: msg,
		ObservedGeneration: c.Generation, LastTransitionTime: metaNow(),
	})
	s.stamp(c)
	_ = s.ext.Tracker().Update(claimsGVR, c, ns)
}

// claimDeleted deletes what claim c controls, as the garbage collector
// does.
func (s *Server) claimDeleted(c *extv1beta1.SandboxClaim) {
	name := c.Status.SandboxStatus.Name
	if name == "" {
		name = c.Name
	}
	obj, err := s.agents.Tracker().Get(sandboxesGVR, c.Namespace, name)
	if err != nil {
		return
	}
	if ref := metav1.GetControllerOf(obj.(*sandboxv1beta1.Sandbox)); ref != nil && ref.UID == c.UID {
		_ = s.agents.Tracker().Delete(sandboxesGVR, c.Namespace, name)
	}
}

func (s *Server) endMachine(ns, name string) {
	s.mu.Lock()
	m, ok := s.machines[machineKey(ns, name)]
	delete(s.machines, machineKey(ns, name))
	s.mu.Unlock()
	if ok {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = m.Destroy(context.Background())
		}()
	}
}

// expire ends the claims past their shutdown time, by their policy.
func (s *Server) expire() {
	list, err := s.ext.Tracker().List(claimsGVR, claimsGVR.GroupVersion().WithKind("SandboxClaim"), "")
	if err != nil {
		return
	}
	now := time.Now()
	for _, c := range list.(*extv1beta1.SandboxClaimList).Items {
		lc := c.Spec.Lifecycle
		if lc == nil || lc.ShutdownTime == nil || now.Before(lc.ShutdownTime.Time) {
			continue
		}
		name := c.Status.SandboxStatus.Name
		if name == "" {
			name = c.Name
		}
		if s.opts.LeakOnExpiry {
			// The claim goes; its Sandbox, orphaned, and its pod stay.
			if obj, err := s.agents.Tracker().Get(sandboxesGVR, c.Namespace, name); err == nil {
				sb := obj.(*sandboxv1beta1.Sandbox)
				sb.OwnerReferences = nil
				s.stamp(sb)
				_ = s.agents.Tracker().Update(sandboxesGVR, sb, c.Namespace)
			}
			_ = s.ext.Tracker().Delete(claimsGVR, c.Namespace, c.Name)
			continue
		}
		if lc.ShutdownPolicy == extv1beta1.ShutdownPolicyRetain {
			if _, err := s.agents.Tracker().Get(sandboxesGVR, c.Namespace, name); err == nil {
				_ = s.agents.Tracker().Delete(sandboxesGVR, c.Namespace, name)
				s.setClaimReady(c.Namespace, c.Name, name, nil, false, extv1beta1.ClaimExpiredReason, "claim expired")
			}
			continue
		}
		_ = s.ext.Tracker().Delete(claimsGVR, c.Namespace, c.Name)
	}
}

func newUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func newUIDType() types.UID { return types.UID(newUID()) }

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:5]
}

func copyIn(ctx context.Context, m *remotefake.Machine, in, host string) error {
	f, err := os.Open(host)
	if err != nil {
		return err
	}
	defer f.Close()
	return m.WriteFile(ctx, in, f, 0o755)
}

// validatePodMetadata checks a claim's additionalPodMetadata as the
// claim controller does: pod labels only of the allowed domains (its
// default, sandbox.users.io), annotations of no restricted domain.
func validatePodMetadata(pm sandboxv1beta1.PodMetadata) error {
	for k, v := range pm.Labels {
		domain, _, ok := strings.Cut(k, "/")
		if !ok {
			return fmt.Errorf("label %q must have a domain prefix", k)
		}
		if domain != "sandbox.users.io" && !strings.HasSuffix(domain, ".sandbox.users.io") {
			return fmt.Errorf("label domain %q is not in the allowlist", domain)
		}
		if len(validation.IsValidLabelValue(v)) > 0 {
			return fmt.Errorf("invalid label value %q", v)
		}
	}
	for k := range pm.Annotations {
		if len(validation.IsQualifiedName(k)) > 0 {
			return fmt.Errorf("invalid annotation key %q", k)
		}
		domain, _, _ := strings.Cut(k, "/")
		for _, d := range []string{"kubernetes.io", "k8s.io", "agents.x-k8s.io"} {
			if domain == d || strings.HasSuffix(domain, "."+d) {
				return fmt.Errorf("restricted system domain: %q", k)
			}
		}
	}
	return nil
}
