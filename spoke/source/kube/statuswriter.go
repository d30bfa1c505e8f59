package kube

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientretry "k8s.io/client-go/util/retry"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/shared/retry"
)

// Defaults of StatusWriterOptions.
const (
	DefaultStatusQPS   = 10
	DefaultStatusBurst = 20
	// statusRetryMax bounds the wait before a failed write is tried again.
	statusRetryMax = time.Minute
)

// Results of one status, as StatusWriter.Results and the
// nave_spoke_gatewayapi_status_writes_total metric name them.
const (
	StatusWritten   = "written"   // the status subresource was updated
	StatusUnchanged = "unchanged" // the object already had the status: nothing written
	StatusStale     = "stale"     // the object's content is not the version the status was computed from: not written
	StatusNotFound  = "not found" // the object is gone
	StatusFailed    = "failed"    // the write failed; retried with backoff
)

// StatusWriterOptions tune a StatusWriter. Zero fields take the defaults.
// A plain value.
type StatusWriterOptions struct {
	// QPS and Burst bound the writer's requests to the API server (its
	// own client; the source's informers are not slowed by it).
	QPS   float32
	Burst int
	// Logger receives the writer's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the writer's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// StatusResult is the outcome of the last attempt to write one object's
// status, shown at the spoke's /debug/gatewayapi-status. A plain value.
type StatusResult struct {
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	Version   string    `json:"version"` // the content version the status was computed from
	Result    string    `json:"result"`  // one of the Status constants
	Error     string    `json:"error,omitempty"`
	At        time.Time `json:"at"`
}

// StatusWriter writes Gateway API statuses to the status subresource of
// their objects in the spoke's cluster: the hub's (SetStatuses) and the
// Accepted condition of the GatewayClasses whose controller is nave's,
// which the spoke concludes alone. A status is written only onto the
// object whose current content has the status's version, with
// observedGeneration the object's generation; only when it differs from
// the object's status; for routes, the parent statuses of other
// controllers are kept. Writes are bounded by the writer's own client
// rate limit and retried on conflict (at once) and on other errors (with
// backoff). SetStatuses, SetObjects and Results may be called from any
// goroutine; Run drives the writer, once.
type StatusWriter struct {
	dyn     dynamic.Interface
	kube    kubernetes.Interface
	logger  *slog.Logger
	writes  *prometheus.CounterVec
	wake    chan struct{}
	now     func() time.Time
	backoff *retry.Backoff // Run's goroutine only

	mu       sync.Mutex
	hub      []*meshconfigv1.GatewayAPIStatus
	versions map[meshconfig.Ref]string // content versions of the source's last publish
	classes  []*meshconfig.Object      // GatewayClasses of nave's controller, from the last publish
	done     map[meshconfig.Ref]string // the status (version and digest) in force on each object
	results  map[meshconfig.Ref]StatusResult
}

// NewStatusWriter makes a writer for the cluster cfg points at. It does
// not contact the API server.
func NewStatusWriter(cfg *rest.Config, opts StatusWriterOptions) (*StatusWriter, error) {
	if cfg == nil {
		return nil, errors.New("gateway API status writer: no rest config")
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	if cfg.QPS <= 0 {
		cfg.QPS = DefaultStatusQPS
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultStatusBurst
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("gateway API status writer: %w", err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("gateway API status writer: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nave_spoke_gatewayapi_status_writes_total",
		Help: "Gateway API statuses handled by the spoke's status writer, by result (written, unchanged, stale, not found, failed).",
	}, []string{"result"})
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(writes); err != nil {
			return nil, fmt.Errorf("gateway API status writer: register metrics: %w", err)
		}
	}
	return &StatusWriter{
		dyn: dyn, kube: kc, logger: logger, writes: writes, wake: make(chan struct{}, 1), now: time.Now,
		backoff:  retry.Policy{Initial: time.Second, Max: statusRetryMax}.New(),
		versions: map[meshconfig.Ref]string{}, done: map[meshconfig.Ref]string{}, results: map[meshconfig.Ref]StatusResult{},
	}, nil
}

// SetStatuses replaces the hub's statuses for this cluster (the full
// current set) and has Run write what changed.
func (w *StatusWriter) SetStatuses(statuses []*meshconfigv1.GatewayAPIStatus) {
	w.mu.Lock()
	w.hub = slices.Clone(statuses)
	w.mu.Unlock()
	w.poke()
}

// SetObjects takes the source's published objects: the content versions
// statuses are checked against before any request (a status computed
// from an older version waits for the next one), and nave's
// GatewayClasses, which get Accepted.
func (w *StatusWriter) SetObjects(objs []*meshconfig.Object) {
	versions := map[meshconfig.Ref]string{}
	var classes []*meshconfig.Object
	for _, o := range objs {
		if !o.Kind.GatewayAPI {
			continue
		}
		versions[o.Ref()] = o.Version
		if o.Kind.Kind == "GatewayClass" {
			if spec, err := meshconfig.GatewayAPISpec(o); err == nil &&
				string(spec.(*gatewayv1.GatewayClassSpec).ControllerName) == meshconfig.GatewayController {
				classes = append(classes, o)
			}
		}
	}
	w.mu.Lock()
	w.versions, w.classes = versions, classes
	w.mu.Unlock()
	w.poke()
}

// Results returns the outcome of the last attempt for every status in
// force, sorted by kind, namespace and name.
func (w *StatusWriter) Results() []StatusResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]StatusResult, 0, len(w.results))
	for _, r := range w.results {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b StatusResult) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func (w *StatusWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run writes statuses until ctx is done, then returns nil. Each change
// (SetStatuses, SetObjects) starts a pass over every status; a pass with
// failures is followed by another after a backoff.
func (w *StatusWriter) Run(ctx context.Context) error {
	var retryC <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		case <-retryC:
		}
		retryC = nil
		if failed := w.pass(ctx); failed > 0 && ctx.Err() == nil {
			retryC = time.After(w.backoff.NextBackOff())
		} else {
			w.backoff.Reset()
		}
	}
}

// pass handles every status once and returns how many failed.
func (w *StatusWriter) pass(ctx context.Context) (failed int) {
	w.mu.Lock()
	want := w.desiredLocked()
	versions := w.versions
	w.mu.Unlock()

	inForce := map[meshconfig.Ref]bool{}
	for _, st := range want {
		ref := meshconfig.Ref{Kind: st.GetKind(), Namespace: st.GetNamespace(), Name: st.GetName()}
		inForce[ref] = true
		key := st.GetVersion() + "/" + digest(st.GetJson())
		res := StatusResult{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, Version: st.GetVersion()}
		w.mu.Lock()
		already := w.done[ref] == key
		last := w.results[ref]
		w.mu.Unlock()
		if v := versions[ref]; v != st.GetVersion() {
			// The source has not published that version (yet, or any
			// more): SetObjects brings the pass that writes it.
			if last.Result == StatusStale && last.Version == st.GetVersion() {
				continue
			}
			res.Result = StatusStale
		} else if already {
			continue
		} else {
			var err error
			res.Result, err = w.write(ctx, st)
			if err != nil {
				res.Error = err.Error()
			}
		}
		res.At = w.now()
		w.writes.WithLabelValues(res.Result).Inc()
		w.mu.Lock()
		prev := w.results[ref]
		w.results[ref] = res
		if res.Result == StatusWritten || res.Result == StatusUnchanged {
			w.done[ref] = key
		}
		w.mu.Unlock()
		switch {
		case res.Result == StatusFailed:
			failed++
			if prev.Error != res.Error {
				w.logger.Warn("gateway API status not written; retrying", "kind", ref.Kind, "namespace", ref.Namespace,
					"name", ref.Name, "err", res.Error)
			}
		case res.Result == StatusWritten:
			w.logger.Debug("gateway API status written", "kind", ref.Kind, "namespace", ref.Namespace, "name", ref.Name,
				"version", st.GetVersion())
		}
	}
	w.mu.Lock()
	for ref := range w.results {
		if !inForce[ref] {
			delete(w.results, ref)
			delete(w.done, ref)
		}
	}
	w.mu.Unlock()
	return failed
}

// desiredLocked returns the hub's statuses and, for nave's GatewayClasses
// the hub gave none, Accepted. w.mu is held.
func (w *StatusWriter) desiredLocked() []*meshconfigv1.GatewayAPIStatus {
	out := slices.Clone(w.hub)
	has := map[meshconfig.Ref]bool{}
	for _, st := range w.hub {
		has[meshconfig.Ref{Kind: st.GetKind(), Namespace: st.GetNamespace(), Name: st.GetName()}] = true
	}
	for _, c := range w.classes {
		if has[c.Ref()] {
			continue
		}
		js, _ := json.Marshal(gatewayv1.GatewayClassStatus{Conditions: []metav1.Condition{{
			Type:    string(gatewayv1.GatewayClassConditionStatusAccepted),
			Status:  metav1.ConditionTrue,
			Reason:  string(gatewayv1.GatewayClassReasonAccepted),
			Message: "Handled by nave",
		}}})
		out = append(out, &meshconfigv1.GatewayAPIStatus{Kind: c.Kind.Kind, Namespace: c.Namespace, Name: c.Name, Version: c.Version, Json: js})
	}
	return out
}

// write reads the status's object from the API server and, when its
// content has the status's version, updates its status subresource if
// the merged status differs. A conflict reads the object again.
func (w *StatusWriter) write(ctx context.Context, st *meshconfigv1.GatewayAPIStatus) (result string, err error) {
	def := statusKind(st.GetKind())
	if def == nil {
		return StatusFailed, fmt.Errorf("%s is not a Gateway API kind with a status", st.GetKind())
	}
	gvr := schema.GroupVersionResource{Group: def.group, Version: def.version, Resource: def.plural}
	var client dynamic.ResourceInterface = w.dyn.Resource(gvr)
	if def.namespaced {
		client = w.dyn.Resource(gvr).Namespace(st.GetNamespace())
	}
	err = clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		u, err := client.Get(ctx, st.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		version, err := contentVersion(def, u)
		if err != nil {
			return err
		}
		if version != st.GetVersion() {
			result = StatusStale
			return nil
		}
		cur, _, _ := unstructured.NestedMap(u.Object, "status")
		var addrs []gatewayv1.GatewayStatusAddress
		if def.mesh.Kind == "KubernetesGateway" {
			if addrs, err = w.gatewayAddresses(ctx, u.GetNamespace(), u.GetName()); err != nil {
				return err
			}
		}
		merged, changed, err := mergeStatus(def.mesh, cur, st.GetJson(), addrs, u.GetGeneration(), metav1.NewTime(w.now().Truncate(time.Second)))
		if err != nil {
			return err
		}
		if !changed {
			result = StatusUnchanged
			return nil
		}
		u.Object["status"] = merged
		if _, err := client.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "nave-spoke"}); err != nil {
			return err
		}
		result = StatusWritten
		return nil
	})
	switch {
	case apierrors.IsNotFound(err):
		return StatusNotFound, nil
	case err != nil:
		return StatusFailed, fmt.Errorf("%s %s/%s status: %w", st.GetKind(), st.GetNamespace(), st.GetName(), err)
	}
	return result, nil
}

// gatewayAddresses returns the addresses of a Gateway's Services (those
// of its namespace labelled gateway.networking.k8s.io/gateway-name with
// its name, as the example deployment's is): their load balancer's
// addresses, else their cluster IPs.
func (w *StatusWriter) gatewayAddresses(ctx context.Context, namespace, name string) ([]gatewayv1.GatewayStatusAddress, error) {
	list, err := w.kube.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{meshconfig.GatewayNameLabel: name}).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("services of gateway %s/%s: %w", namespace, name, err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Service) int { return cmp.Compare(a.Name, b.Name) })
	var out []gatewayv1.GatewayStatusAddress
	add := func(typ gatewayv1.AddressType, value string) {
		a := gatewayv1.GatewayStatusAddress{Type: ptr(typ), Value: value}
		if value != "" && !slices.ContainsFunc(out, func(b gatewayv1.GatewayStatusAddress) bool { return *b.Type == typ && b.Value == value }) {
			out = append(out, a)
		}
	}
	for _, svc := range list.Items {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			add(gatewayv1.IPAddressType, in.IP)
			add(gatewayv1.HostnameAddressType, in.Hostname)
		}
	}
	if len(out) == 0 {
		for _, svc := range list.Items {
			for _, ip := range svc.Spec.ClusterIPs {
				if ip != corev1.ClusterIPNone {
					add(gatewayv1.IPAddressType, ip)
				}
			}
		}
	}
	return out, nil
}

// statusKind returns the watched Gateway API kind of a config kind name,
// nil for one without a status (ReferenceGrant) or not of the Gateway API.
func statusKind(kind string) *kindDef {
	for _, d := range kindDefs {
		if d.mesh != nil && d.mesh.GatewayAPI && d.mesh.Kind == kind && kind != "ReferenceGrant" {
			return d
		}
	}
	return nil
}

// contentVersion converts an object read from the API server as the
// source converts its cached copy and returns its content version.
func contentVersion(def *kindDef, u *unstructured.Unstructured) (string, error) {
	obj := def.newObject()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return "", fmt.Errorf("convert %s %s: %w", def.name, u.GetName(), err)
	}
	obj, _ = def.transform(obj)
	meta, err := apimeta.Accessor(obj)
	if err != nil {
		return "", err
	}
	o, rej := configObject(def, obj, meta)
	if rej != nil {
		return "", fmt.Errorf("%s: %s", rej.Field, rej.Reason)
	}
	return o.Version, nil
}

// mergeStatus merges the hub's status (json, the kind's Gateway API
// status type) into an object's current status, with the CRD schema's
// defaults filled in (the API server stores them, so a status without
// them would always differ): conditions get
// observedGeneration gen, and keep their lastTransitionTime while their
// status stays (now otherwise); a route's parent statuses of other
// controllers are kept; a Gateway the hub gives no addresses gets addrs
// (its Services'). It reports whether the result differs from cur.
func mergeStatus(k *meshconfig.Kind, cur map[string]any, js []byte, addrs []gatewayv1.GatewayStatusAddress, gen int64, now metav1.Time) (map[string]any, bool, error) {
	var curGo, merged any
	switch k.Kind {
	case "GatewayClass":
		var c, h gatewayv1.GatewayClassStatus
		if err := parseStatus(cur, js, &c, &h); err != nil {
			return nil, false, err
		}
		h.Conditions = conditions(c.Conditions, h.Conditions, gen, now)
		if h.SupportedFeatures == nil {
			h.SupportedFeatures = c.SupportedFeatures
		}
		curGo, merged = &c, &h
	case "KubernetesGateway":
		var c, h gatewayv1.GatewayStatus
		if err := parseStatus(cur, js, &c, &h); err != nil {
			return nil, false, err
		}
		h.Conditions = conditions(c.Conditions, h.Conditions, gen, now)
		for i := range h.Listeners {
			var prev []metav1.Condition
			if j := slices.IndexFunc(c.Listeners, func(l gatewayv1.ListenerStatus) bool { return l.Name == h.Listeners[i].Name }); j >= 0 {
				prev = c.Listeners[j].Conditions
			}
			h.Listeners[i].Conditions = conditions(prev, h.Listeners[i].Conditions, gen, now)
			if h.Listeners[i].SupportedKinds == nil {
				h.Listeners[i].SupportedKinds = []gatewayv1.RouteGroupKind{} // required by the schema
			}
			for j := range h.Listeners[i].SupportedKinds {
				if sk := &h.Listeners[i].SupportedKinds[j]; sk.Group == nil {
					sk.Group = ptr(gatewayv1.Group(gatewayv1.GroupName))
				}
			}
		}
		if h.Addresses == nil {
			h.Addresses = addrs
		}
		for i := range h.Addresses {
			if a := &h.Addresses[i]; a.Type == nil {
				a.Type = ptr(gatewayv1.IPAddressType)
			}
		}
		curGo, merged = &c, &h
	default: // the routes
		var c, h gatewayv1.RouteStatus
		if err := parseStatus(cur, js, &c, &h); err != nil {
			return nil, false, err
		}
		parents := make([]gatewayv1.RouteParentStatus, 0, len(c.Parents)+len(h.Parents))
		for _, p := range c.Parents {
			if p.ControllerName != meshconfig.GatewayController {
				parents = append(parents, p)
			}
		}
		for _, p := range h.Parents {
			p.ControllerName = meshconfig.GatewayController
			if p.ParentRef.Group == nil {
				p.ParentRef.Group = ptr(gatewayv1.Group(gatewayv1.GroupName))
			}
			if p.ParentRef.Kind == nil {
				p.ParentRef.Kind = ptr(gatewayv1.Kind("Gateway"))
			}
			var prev []metav1.Condition
			if j := slices.IndexFunc(c.Parents, func(q gatewayv1.RouteParentStatus) bool {
				return q.ControllerName == meshconfig.GatewayController && apiequality.Semantic.DeepEqual(q.ParentRef, p.ParentRef)
			}); j >= 0 {
				prev = c.Parents[j].Conditions
			}
			p.Conditions = conditions(prev, p.Conditions, gen, now)
			parents = append(parents, p)
		}
		h.Parents = parents
		curGo, merged = &c, &h
	}
	if apiequality.Semantic.DeepEqual(curGo, merged) {
		return cur, false, nil
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(merged)
	if err != nil {
		return nil, false, fmt.Errorf("status: %w", err)
	}
	return out, true, nil
}

// parseStatus decodes the current status (unstructured) into cur and the
// hub's (JSON) into hub.
func parseStatus(cur map[string]any, js []byte, curGo, hubGo any) error {
	if cur != nil {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cur, curGo); err != nil {
			return fmt.Errorf("current status: %w", err)
		}
	}
	if err := json.Unmarshal(js, hubGo); err != nil {
		return fmt.Errorf("hub status: %w", err)
	}
	return nil
}

// conditions returns want with observedGeneration gen, each keeping the
// lastTransitionTime of prev's condition of its type if that has the
// same status, and now otherwise.
func conditions(prev, want []metav1.Condition, gen int64, now metav1.Time) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(want))
	for _, c := range want {
		c.ObservedGeneration = gen
		c.LastTransitionTime = now
		if p := apimeta.FindStatusCondition(prev, c.Type); p != nil && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
		}
		out = append(out, c)
	}
	return out
}

// digest identifies a status's content.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func ptr[T any](v T) *T { return &v }
