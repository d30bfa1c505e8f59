// Package kube is the spoke's kubernetes config source: it watches a
// cluster's Services, EndpointSlices, Pods, Namespaces, Nodes, Istio
// config kinds and Kubernetes Gateway API kinds through client-go
// informers, normalizes them into nave's config objects (registry
// Services and Workloads, Istio and Gateway API specs) and publishes the
// complete set after its initial sync and after every debounced batch of
// changes. Its StatusWriter writes the hub's Gateway API statuses back to
// the cluster's objects.
package kube

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/meshconfig"
)

// Defaults for zero Options fields.
const (
	DefaultDomainSuffix = "cluster.local"
	DefaultDebounce     = 100 * time.Millisecond
	DefaultCRDPoll      = 30 * time.Second
)

// Options tune a Source. Zero fields take the defaults above. Options is
// a plain value.
type Options struct {
	// DomainSuffix completes service hostnames: name.namespace.svc.<suffix>.
	DomainSuffix string
	// Network is the cluster's network: the network of every workload,
	// WorkloadEntry and ServiceEntry endpoint that has none after the
	// entry's own network field, its (pod's, entry's) and its namespace's
	// topology.istio.io/network labels. Empty: none.
	Network string
	// NamespaceSelector is a label selector ("env=prod,team in (a,b)")
	// that namespaces must match for their objects to be published, like
	// Istio's discoverySelectors. Empty selects every namespace. A
	// selector needs the Namespace kind: while the source cannot list
	// namespaces, it selects none.
	NamespaceSelector string
	// Debounce is how long changes must stay quiet before they are
	// published after the initial sync; a change that never stops is
	// published at least every ten Debounce periods.
	Debounce time.Duration
	// DebounceEdge is the debounce's edge: debounce.Leading publishes the
	// first change after a quiet period at once; the zero value is
	// debounce.Trailing.
	DebounceEdge debounce.Edge
	// CRDPoll is how often the API server is asked again for the Istio
	// kinds whose CustomResourceDefinitions were missing.
	CRDPoll time.Duration
	// OnSynced, if set, is called once, on Run's goroutine, when every
	// awaited kind has synced, before the initial build: the informers'
	// initial lists are in their caches, and what decoding them used is
	// garbage.
	OnSynced func()
	// Logger receives the source's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the source's metrics; nil registers none.
	Registerer prometheus.Registerer
}

func (o Options) withDefaults() Options {
	if o.DomainSuffix == "" {
		o.DomainSuffix = DefaultDomainSuffix
	}
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.CRDPoll <= 0 {
		o.CRDPoll = DefaultCRDPoll
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Source watches one cluster. Run drives it, once; Ready, Status and
// Objects may be called from any goroutine at any time.
type Source struct {
	opts     Options
	selector labels.Selector // nil selects every namespace
	kube     kubernetes.Interface
	clients  *clients
	logger   *slog.Logger
	metrics  *metrics
	started  atomic.Bool
	wake     chan struct{} // poked (never blocking) when something changed
	// labelSets shares equal label maps among the cached pods.
	labelSets *labelSets

	// kinds are the watched kinds, in the order of kindDefs. Their
	// mutable state is guarded by mu.
	kinds []*watched

	mu         sync.RWMutex
	published  bool   // the initial state was published
	discovered bool   // discovery answered for the Istio groups at least once
	discErr    string // the last discovery error, while discovery fails
	objects    []*meshconfig.Object
	rejected   map[string][]meshconfig.Rejection // by watched kind name
	counts     map[string]int                    // cached objects in selected namespaces, by watched kind name
}

// New makes a source for the cluster cfg points at. It registers the
// source's metrics on opts.Registerer and fails if they are already
// registered or the namespace selector does not parse. It does not
// contact the API server: an unreachable one is Run's concern.
func New(cfg *rest.Config, opts Options) (*Source, error) {
	if cfg == nil {
		return nil, errors.New("kubernetes source: no rest config")
	}
	opts = opts.withDefaults()
	var sel labels.Selector
	if s := strings.TrimSpace(opts.NamespaceSelector); s != "" {
		parsed, err := labels.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("kubernetes source: namespace selector %q: %w", s, err)
		}
		sel = parsed
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes source: kubernetes client: %w", err)
	}
	// The informers of the core and discovery kinds read protobuf, as the
	// Kubernetes components do: it decodes in a fraction of JSON's time
	// and garbage, which is most of a large cluster's start. Discovery
	// (kc) reads JSON.
	pc := rest.CopyConfig(cfg)
	pc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	pc.ContentType = runtime.ContentTypeProtobuf
	kp, err := kubernetes.NewForConfig(pc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes source: kubernetes client: %w", err)
	}
	ic, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes source: istio client: %w", err)
	}
	gc, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes source: gateway API client: %w", err)
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes source: metadata client: %w", err)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("kubernetes source: %w", err)
	}
	s := &Source{
		opts:      opts,
		selector:  sel,
		kube:      kc,
		clients:   &clients{kube: kp, istio: ic, gateway: gc, metadata: mc},
		logger:    opts.Logger,
		metrics:   m,
		wake:      make(chan struct{}, 1),
		labelSets: newLabelSets(),
	}
	for _, d := range kindDefs {
		s.kinds = append(s.kinds, &watched{def: d})
	}
	m.notSynced.Set(float64(len(s.kinds)))
	return s, nil
}

// Objects returns the objects of the last publish, sorted by kind,
// namespace and name. The slice is the caller's; the objects are shared
// and must not be modified.
func (s *Source) Objects() []*meshconfig.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.objects)
}

// NamespaceNetwork is the network of a namespace's workloads that say
// none themselves, as the source reports them: the namespace's
// topology.istio.io/network label, else Options.Network. The injector
// gives it to the proxies of the namespace's pods. Safe for concurrent
// use; before the namespaces are listed it is Options.Network.
func (s *Source) NamespaceNetwork(namespace string) string {
	if st := s.store(kindNamespace); st != nil {
		if item, ok, err := st.GetByKey(namespace); err == nil && ok {
			if ns, ok := item.(*corev1.Namespace); ok && ns.Labels[meshconfig.NetworkLabel] != "" {
				return ns.Labels[meshconfig.NetworkLabel]
			}
		}
	}
	return s.opts.Network
}

// Ready returns nil once the initial state was published, and otherwise
// an error that names what the source still waits for.
func (s *Source) Ready() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.published {
		return nil
	}
	if !s.started.Load() {
		return errors.New("kubernetes source not started")
	}
	var waiting []string
	if !s.discovered {
		w := "API discovery of the CRD kinds (Istio, Gateway API)"
		if s.discErr != "" {
			w += " (" + s.discErr + ")"
		}
		waiting = append(waiting, w)
	}
	for _, k := range s.kinds {
		if k.blocking() {
			w := k.def.name
			if k.lastErr != "" {
				w += " (" + k.lastErr + ")"
			}
			waiting = append(waiting, w)
		}
	}
	if len(waiting) == 0 {
		return errors.New("kubernetes source: initial state not published yet")
	}
	return fmt.Errorf("kubernetes source not synced yet, waiting for: %s", strings.Join(waiting, ", "))
}
