package gatewaycert

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ReferenceGrants is the Gateway API resource the spoke reads to allow a
// Secret across namespaces: v1beta1, which every Gateway API release
// since v0.6 serves (v1 too, from v1.5).
var ReferenceGrants = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1beta1", Resource: "referencegrants"}

// watched is one watch of the API server, shared by the streams that need
// it and stopped with the last one.
type watched struct {
	refs int
	inf  cache.SharedIndexInformer
	stop chan struct{}

	mu      sync.Mutex
	lastErr error // the last list or watch error, nil once it lists
}

func (w *watched) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// watches holds the single-Secret and per-namespace ReferenceGrant
// watches the open streams asked for; any event calls onChange. Safe for
// concurrent use.
type watches struct {
	cs       kubernetes.Interface
	dyn      dynamic.Interface
	log      *slog.Logger
	metrics  *metrics
	onChange func()

	mu      sync.Mutex
	secrets map[string]*watched // namespace/name
	grants  map[string]*watched // namespace
}

func newWatches(cs kubernetes.Interface, dyn dynamic.Interface, log *slog.Logger, m *metrics, onChange func()) *watches {
	return &watches{cs: cs, dyn: dyn, log: log, metrics: m, onChange: onChange,
		secrets: map[string]*watched{}, grants: map[string]*watched{}}
}

// acquireSecret starts (or shares) the watch of the Secret namespace/name:
// a list and watch with a field selector on its name, so the spoke holds
// only the Secrets gateways asked for.
func (w *watches) acquireSecret(key string) {
	w.acquire(w.secrets, key, func() cache.SharedIndexInformer {
		ns, name := splitKey(key)
		sel := fields.OneTermEqualSelector("metadata.name", name).String()
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return w.cs.CoreV1().Secrets(ns).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return w.cs.CoreV1().Secrets(ns).Watch(ctx, o)
			},
		}
		return cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
	})
	w.metrics.watched.Set(float64(w.count()))
}

// acquireGrants starts (or shares) the watch of namespace's
// ReferenceGrants.
func (w *watches) acquireGrants(namespace string) {
	w.acquire(w.grants, namespace, func() cache.SharedIndexInformer {
		return dynamicinformer.NewFilteredDynamicInformer(w.dyn, ReferenceGrants, namespace, 0, cache.Indexers{}, nil).Informer()
	})
}

func (w *watches) acquire(m map[string]*watched, key string, newInformer func() cache.SharedIndexInformer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := m[key]; x != nil {
		x.refs++
		return
	}
	x := &watched{refs: 1, inf: newInformer(), stop: make(chan struct{})}
	notify := func(any) { w.onChange() }
	_, _ = x.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: notify, UpdateFunc: func(any, any) { w.onChange() }, DeleteFunc: notify})
	_ = x.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		x.mu.Lock()
		first := x.lastErr == nil
		x.lastErr = err
		x.mu.Unlock()
		if first {
			w.log.Warn("gateway credentials: cannot watch", "what", key, "error", err)
			w.onChange()
		}
	})
	m[key] = x
	go x.inf.Run(x.stop)
	go func() {
		// Synced: the first list is in the store; the streams answer then.
		if cache.WaitForCacheSync(x.stop, x.inf.HasSynced) {
			x.mu.Lock()
			x.lastErr = nil
			x.mu.Unlock()
			w.onChange()
		}
	}()
}

func (w *watches) releaseSecret(key string) {
	w.release(w.secrets, key)
	w.metrics.watched.Set(float64(w.count()))
}

func (w *watches) releaseGrants(namespace string) { w.release(w.grants, namespace) }

func (w *watches) release(m map[string]*watched, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	x := m[key]
	if x == nil {
		return
	}
	if x.refs--; x.refs == 0 {
		close(x.stop)
		delete(m, key)
	}
}

func (w *watches) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.secrets)
}

// lookup is the state of a watch: its objects once synced; pending (nil,
// nil) before; the last error while it cannot list.
func (w *watches) lookup(m map[string]*watched, key string) ([]any, error) {
	w.mu.Lock()
	x := m[key]
	w.mu.Unlock()
	if x == nil {
		return nil, nil
	}
	if !x.inf.HasSynced() {
		return nil, x.failed()
	}
	objs := x.inf.GetStore().List()
	if objs == nil {
		objs = []any{}
	}
	return objs, nil
}

// secret returns the watched Secret key: found, or not (ok), or pending
// (not synced, no error), or the watch's error.
func (w *watches) secret(key string) (s *corev1.Secret, synced bool, err error) {
	objs, err := w.lookup(w.secrets, key)
	if objs == nil {
		return nil, false, err
	}
	for _, o := range objs {
		if sec, ok := o.(*corev1.Secret); ok {
			return sec, true, nil
		}
	}
	return nil, true, nil
}

// grantAllows reports whether a ReferenceGrant in namespace allows
// Gateways of from to read the Secret name; synced false while the
// ReferenceGrants are not listed yet.
func (w *watches) grantAllows(namespace, from, name string) (allowed, synced bool, err error) {
	objs, err := w.lookup(w.grants, namespace)
	if objs == nil {
		return false, false, err
	}
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if ok && grantAllows(u.Object, from, name) {
			return true, true, nil
		}
	}
	return false, true, nil
}

// grantAllows reads a ReferenceGrant's spec: some from is a Gateway of
// namespace from, and some to is a Secret, of that name or any.
func grantAllows(obj map[string]any, from, name string) bool {
	fromOK, toOK := false, false
	froms, _, _ := unstructured.NestedSlice(obj, "spec", "from")
	for _, f := range froms {
		m, _ := f.(map[string]any)
		if str(m, "group") == "gateway.networking.k8s.io" && str(m, "kind") == "Gateway" && str(m, "namespace") == from {
			fromOK = true
		}
	}
	tos, _, _ := unstructured.NestedSlice(obj, "spec", "to")
	for _, t := range tos {
		m, _ := t.(map[string]any)
		if str(m, "group") == "" && str(m, "kind") == "Secret" && (str(m, "name") == "" || str(m, "name") == name) {
			toOK = true
		}
	}
	return fromOK && toOK
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func splitKey(key string) (namespace, name string) {
	namespace, name, _ = strings.Cut(key, "/")
	return namespace, name
}
