package gkefake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

// maxBody bounds a request's body.
const maxBody = 1 << 20

// maxListLimit bounds a page of a listing, as the fake serves it.
const maxListLimit = 500

// apiRequest is one request of the Kubernetes API, parsed.
type apiRequest struct {
	gvr       schema.GroupVersionResource
	namespace string // "" for every namespace (a list or watch only)
	name      string
	verb      string // get, list, watch, create, update, delete
}

// op is the operation's name Requests counts.
func (q apiRequest) op() string { return q.verb + " " + q.gvr.Resource }

// parsePath parses /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME].
func parsePath(p string) (apiRequest, bool) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if len(parts) < 4 || parts[0] != "apis" {
		return apiRequest{}, false
	}
	q := apiRequest{}
	group, version, rest := parts[1], parts[2], parts[3:]
	if rest[0] == "namespaces" {
		if len(rest) < 3 {
			return apiRequest{}, false
		}
		q.namespace, rest = rest[1], rest[2:]
	}
	q.gvr = schema.GroupVersionResource{Group: group, Version: version, Resource: rest[0]}
	switch q.gvr {
	case sandboxesGVR, claimsGVR, templatesGVR, warmpoolsGVR:
	default:
		return apiRequest{}, false
	}
	switch len(rest) {
	case 1:
	case 2:
		q.name = rest[1]
		if q.namespace == "" {
			return apiRequest{}, false
		}
	default:
		return apiRequest{}, false
	}
	return q, true
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.opts.Token {
		s.log.Info("gkefake: unauthorized", "path", r.URL.Path, "authorization", r.Header.Get("Authorization") != "")
		s.begin("unauthorized")
		writeStatus(w, apierrors.NewUnauthorized("Unauthorized"))
		return
	}
	if strings.HasPrefix(r.URL.Path, "/api/v1/") {
		s.servePortForward(w, r)
		return
	}
	q, ok := parsePath(r.URL.Path)
	if !ok {
		s.begin("unknown")
		s.violation("%s %s: no such resource", r.Method, r.URL.Path)
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
		return
	}
	switch {
	case r.Method == http.MethodGet && q.name != "":
		q.verb = "get"
	case r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		q.verb = "watch"
	case r.Method == http.MethodGet:
		q.verb = "list"
	case r.Method == http.MethodPost && q.name == "" && q.namespace != "":
		q.verb = "create"
	case r.Method == http.MethodPut && q.name != "":
		q.verb = "update"
	case r.Method == http.MethodDelete && q.name != "":
		q.verb = "delete"
	default:
		s.begin("unknown")
		s.violation("%s %s: method not allowed", r.Method, r.URL.Path)
		writeStatus(w, apierrors.NewMethodNotSupported(q.gvr.GroupResource(), r.Method))
		return
	}
	f := s.begin(q.op())
	if failed(w, f, q.gvr.GroupResource(), q.name) {
		return
	}
	var code int
	var out runtime.Object
	var err error
	switch q.verb {
	case "get":
		out, err = s.tracker(q.gvr).Get(q.gvr, q.namespace, q.name)
	case "list":
		out, err = s.list(q, r)
	case "watch":
		s.watch(w, r, q)
		return
	case "create":
		code = http.StatusCreated
		out, err = s.create(q, r)
	case "update":
		out, err = s.update(q, r)
	case "delete":
		out, err = s.deleteObject(q)
	}
	if f != nil && f.Drop {
		dropConn(w)
		return
	}
	if err != nil {
		if se, ok := err.(*apierrors.StatusError); ok {
			writeStatus(w, se)
		} else {
			writeStatus(w, apierrors.NewInternalError(err))
		}
		return
	}
	if code == 0 {
		code = http.StatusOK
	}
	writeObject(w, code, q.gvr, out)
}

// writeObject answers obj as JSON, its kind and apiVersion set.
func writeObject(w http.ResponseWriter, code int, gvr schema.GroupVersionResource, obj runtime.Object) {
	setTypeMeta(obj, gvr)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(obj)
}

func setTypeMeta(obj runtime.Object, gvr schema.GroupVersionResource) {
	kind := resourceKinds[gvr.Resource]
	if _, err := meta.ListAccessor(obj); err == nil && meta.IsListType(obj) {
		kind += "List"
		items, _ := meta.ExtractList(obj)
		for _, it := range items {
			it.GetObjectKind().SetGroupVersionKind(gvr.GroupVersion().WithKind(resourceKinds[gvr.Resource]))
		}
	}
	obj.GetObjectKind().SetGroupVersionKind(gvr.GroupVersion().WithKind(kind))
}

func (s *Server) tracker(gvr schema.GroupVersionResource) clienttesting.ObjectTracker {
	if gvr == sandboxesGVR {
		return s.agents.Tracker()
	}
	return s.ext.Tracker()
}

// newObject is an empty object of gvr's kind.
func newObject(gvr schema.GroupVersionResource) runtime.Object {
	switch gvr {
	case sandboxesGVR:
		return &sandboxv1beta1.Sandbox{}
	case claimsGVR:
		return &extv1beta1.SandboxClaim{}
	case templatesGVR:
		return &extv1beta1.SandboxTemplate{}
	}
	return &extv1beta1.SandboxWarmPool{}
}

// decodeBody decodes the body of r strictly into a new object of q's
// kind, and checks its kind, apiVersion and metadata.
func (s *Server) decodeBody(q apiRequest, r *http.Request) (runtime.Object, metav1.Object, error) {
	gr := q.gvr.GroupResource()
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(b) > maxBody {
		return nil, nil, apierrors.NewRequestEntityTooLargeError("body too large")
	}
	obj := newObject(q.gvr)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		s.violation("%s %s: body: %v", r.Method, r.URL.Path, err)
		return nil, nil, apierrors.NewBadRequest("the body does not decode: " + err.Error())
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind != "" && (gvk.Kind != resourceKinds[q.gvr.Resource] || gvk.GroupVersion() != q.gvr.GroupVersion()) {
		s.violation("%s %s: kind %v", r.Method, r.URL.Path, gvk)
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the kind %v does not match the path", gvk))
	}
	m, _ := meta.Accessor(obj)
	var errs []string
	if m.GetNamespace() != "" && m.GetNamespace() != q.namespace {
		errs = append(errs, "metadata.namespace: does not match the namespace of the request")
	}
	if m.GetName() == "" && m.GetGenerateName() == "" {
		errs = append(errs, "metadata.name: Required value")
	}
	for _, e := range validation.IsDNS1123Subdomain(m.GetName()) {
		if m.GetName() != "" {
			errs = append(errs, "metadata.name: "+e)
		}
	}
	for k, v := range m.GetLabels() {
		for _, e := range validation.IsQualifiedName(k) {
			errs = append(errs, "metadata.labels "+k+": "+e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			errs = append(errs, "metadata.labels "+k+": "+e)
		}
	}
	if c, ok := obj.(*extv1beta1.SandboxClaim); ok {
		if c.Spec.WarmPoolRef.Name == "" {
			errs = append(errs, "spec.warmPoolRef.name: Required value")
		}
		for k, v := range c.Spec.AdditionalPodMetadata.Labels {
			if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
				errs = append(errs, "spec.additionalPodMetadata.labels "+k+": invalid")
			}
		}
		for k := range c.Spec.AdditionalPodMetadata.Annotations {
			if len(validation.IsQualifiedName(k)) > 0 {
				errs = append(errs, "spec.additionalPodMetadata.annotations "+k+": invalid")
			}
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		s.violation("%s %s: invalid: %s", r.Method, r.URL.Path, strings.Join(errs, "; "))
		st := apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: resourceKinds[q.gvr.Resource]}, m.GetName(), nil)
		st.ErrStatus.Message = fmt.Sprintf("%s %q is invalid: %s", resourceKinds[q.gvr.Resource], m.GetName(), strings.Join(errs, "; "))
		return nil, nil, st
	}
	return obj, m, nil
}

// stamp gives m what the API server sets on a write.
func (s *Server) stamp(m metav1.Object) {
	s.mu.Lock()
	s.seq++
	rv := strconv.Itoa(s.seq)
	s.mu.Unlock()
	m.SetResourceVersion(rv)
}

func (s *Server) create(q apiRequest, r *http.Request) (runtime.Object, error) {
	obj, m, err := s.decodeBody(q, r)
	if err != nil {
		return nil, err
	}
	if m.GetName() == "" {
		m.SetName(m.GetGenerateName() + randomSuffix())
	}
	m.SetNamespace(q.namespace)
	if q.gvr == claimsGVR && s.opts.MaxClaims > 0 {
		list, err := s.ext.Tracker().List(claimsGVR, claimsGVR.GroupVersion().WithKind("SandboxClaim"), q.namespace)
		if err != nil {
			return nil, err
		}
		if n := len(list.(*extv1beta1.SandboxClaimList).Items); n >= s.opts.MaxClaims {
			return nil, apierrors.NewForbidden(claimsGVR.GroupResource(), m.GetName(), fmt.Errorf(
				"exceeded quota: berth-quota, requested: count/sandboxclaims.extensions.agents.x-k8s.io=1, used: count/sandboxclaims.extensions.agents.x-k8s.io=%d, limited: count/sandboxclaims.extensions.agents.x-k8s.io=%d", n, s.opts.MaxClaims))
		}
	}
	m.SetUID(types.UID(newUID()))
	m.SetCreationTimestamp(metaNow())
	m.SetGeneration(1)
	m.SetDeletionTimestamp(nil)
	m.SetManagedFields(nil)
	s.stamp(m)
	// The status of a new object is the controller's to write.
	switch o := obj.(type) {
	case *extv1beta1.SandboxClaim:
		o.Status = extv1beta1.SandboxClaimStatus{}
	case *sandboxv1beta1.Sandbox:
		o.Status = sandboxv1beta1.SandboxStatus{}
	}
	if err := s.tracker(q.gvr).Create(q.gvr, obj, q.namespace); err != nil {
		return nil, err
	}
	return obj, nil
}

func (s *Server) update(q apiRequest, r *http.Request) (runtime.Object, error) {
	obj, m, err := s.decodeBody(q, r)
	if err != nil {
		return nil, err
	}
	if m.GetName() != q.name {
		s.violation("PUT %s: metadata.name %q", r.URL.Path, m.GetName())
		return nil, apierrors.NewBadRequest("the name of the object does not match the name on the URL")
	}
	old, err := s.tracker(q.gvr).Get(q.gvr, q.namespace, q.name)
	if err != nil {
		return nil, err
	}
	om, _ := meta.Accessor(old)
	if m.GetResourceVersion() == "" {
		s.violation("PUT %s: no metadata.resourceVersion", r.URL.Path)
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: q.gvr.Group, Kind: resourceKinds[q.gvr.Resource]}, q.name, nil)
	}
	if m.GetResourceVersion() != om.GetResourceVersion() {
		return nil, apierrors.NewConflict(q.gvr.GroupResource(), q.name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	// What only the server writes stays as it was; so does the status,
	// a subresource of its own.
	m.SetUID(om.GetUID())
	m.SetCreationTimestamp(om.GetCreationTimestamp())
	m.SetOwnerReferences(om.GetOwnerReferences())
	m.SetGeneration(om.GetGeneration() + 1)
	switch o := obj.(type) {
	case *extv1beta1.SandboxClaim:
		o.Status = old.(*extv1beta1.SandboxClaim).Status
	case *sandboxv1beta1.Sandbox:
		o.Status = old.(*sandboxv1beta1.Sandbox).Status
	}
	s.stamp(m)
	if err := s.tracker(q.gvr).Update(q.gvr, obj, q.namespace); err != nil {
		return nil, err
	}
	return obj, nil
}

func (s *Server) deleteObject(q apiRequest) (runtime.Object, error) {
	if err := s.tracker(q.gvr).Delete(q.gvr, q.namespace, q.name); err != nil {
		return nil, err
	}
	st := &metav1.Status{Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{Name: q.name, Group: q.gvr.Group, Kind: q.gvr.Resource}}
	return st, nil
}

// selectors are a listing's label and field selectors.
func (s *Server) selectors(r *http.Request) (labels.Selector, fields.Selector, error) {
	ls, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		s.violation("%s: labelSelector: %v", r.URL.Path, err)
		return nil, nil, apierrors.NewBadRequest("labelSelector: " + err.Error())
	}
	fs, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
	if err != nil {
		s.violation("%s: fieldSelector: %v", r.URL.Path, err)
		return nil, nil, apierrors.NewBadRequest("fieldSelector: " + err.Error())
	}
	for _, req := range fs.Requirements() {
		if req.Field != "metadata.name" && req.Field != "metadata.namespace" {
			s.violation("%s: fieldSelector on %s", r.URL.Path, req.Field)
			return nil, nil, apierrors.NewBadRequest("field label not supported: " + req.Field)
		}
	}
	return ls, fs, nil
}

func matches(obj runtime.Object, ls labels.Selector, fs fields.Selector) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return ls.Matches(labels.Set(m.GetLabels())) &&
		fs.Matches(fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()})
}

// list answers a page of the listing: limit and continue (the offset,
// in name order) as the API server pages.
func (s *Server) list(q apiRequest, r *http.Request) (runtime.Object, error) {
	ls, fs, err := s.selectors(r)
	if err != nil {
		return nil, err
	}
	limit := 0
	if l := r.URL.Query().Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 0 {
			s.violation("%s: limit %q", r.URL.Path, l)
			return nil, apierrors.NewBadRequest("limit: " + l)
		}
	}
	offset := 0
	if c := r.URL.Query().Get("continue"); c != "" {
		if offset, err = strconv.Atoi(c); err != nil || offset < 0 {
			return nil, apierrors.NewResourceExpired("the continue token is not valid: " + c)
		}
	}
	gvk := q.gvr.GroupVersion().WithKind(resourceKinds[q.gvr.Resource])
	all, err := s.tracker(q.gvr).List(q.gvr, gvk, q.namespace)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(all)
	if err != nil {
		return nil, err
	}
	var kept []runtime.Object
	for _, it := range items {
		if matches(it, ls, fs) {
			kept = append(kept, it)
		}
	}
	sort.Slice(kept, func(i, j int) bool {
		a, _ := meta.Accessor(kept[i])
		b, _ := meta.Accessor(kept[j])
		return a.GetNamespace()+"/"+a.GetName() < b.GetNamespace()+"/"+b.GetName()
	})
	if offset > len(kept) {
		offset = len(kept)
	}
	kept = kept[offset:]
	if limit == 0 || limit > maxListLimit {
		limit = maxListLimit
	}
	next := ""
	if len(kept) > limit {
		kept = kept[:limit]
		next = strconv.Itoa(offset + limit)
	}
	if err := meta.SetList(all, kept); err != nil {
		return nil, err
	}
	lm, _ := meta.ListAccessor(all)
	lm.SetContinue(next)
	s.mu.Lock()
	lm.SetResourceVersion(strconv.Itoa(s.seq))
	s.mu.Unlock()
	return all, nil
}

// watch streams the tracker's events that the selectors match, as the
// API server's watch does (one JSON object a line), until the client
// goes, timeoutSeconds pass, or the fake closes.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, q apiRequest) {
	ls, fs, err := s.selectors(r)
	if err != nil {
		writeStatus(w, err.(*apierrors.StatusError))
		return
	}
	wi, err := s.tracker(q.gvr).Watch(q.gvr, q.namespace)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	defer wi.Stop()
	timeout := 30 * time.Minute
	if t, err := strconv.Atoi(r.URL.Query().Get("timeoutSeconds")); err == nil && t > 0 {
		timeout = time.Duration(t) * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	flush()
	enc := json.NewEncoder(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		case <-timer.C:
			return
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return
			}
			if ev.Type == watch.Error || !matches(ev.Object, ls, fs) {
				continue
			}
			setTypeMeta(ev.Object, q.gvr)
			raw, err := json.Marshal(ev.Object)
			if err != nil {
				return
			}
			if err := enc.Encode(metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}}); err != nil {
				return
			}
			flush()
		}
	}
}
