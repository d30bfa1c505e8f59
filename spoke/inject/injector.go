package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/spoke/admission"
	"github.com/navemesh/nave/spoke/appprobe"
)

var podResource = metav1.GroupVersionResource{Version: "v1", Resource: "pods"}

// Injector is the mutating admission Reviewer of pods. It is safe for
// concurrent use: it keeps nothing between reviews but its metrics.
type Injector struct {
	opts Options
	log  *slog.Logger
	pods *prometheus.CounterVec
}

// New checks opts and returns an Injector.
func New(opts Options) (*Injector, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.Revision == "" {
		opts.Revision = DefaultRevision
	}
	in := &Injector{opts: opts, log: opts.Logger}
	if in.log == nil {
		in.log = slog.New(slog.DiscardHandler)
	}
	in.pods = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_spoke_inject_pods_total",
		Help: "Pods the sidecar injector reviewed, by result (injected, already_injected, opted_out, other_revision, system_namespace, host_network, not_a_pod_create, refused)."},
		[]string{"result"})
	for _, r := range results {
		in.pods.WithLabelValues(r)
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(in.pods)
	}
	return in, nil
}

// statusValue is the sidecar.istio.io/status annotation of an injected
// pod: what was added, as Istio's says it.
type statusValue struct {
	Templates      []string `json:"templates"`
	InitContainers []string `json:"initContainers"`
	Containers     []string `json:"containers"`
	Volumes        []string `json:"volumes"`
	Revision       string   `json:"revision"`
}

// Review answers one admission request: a pod CREATE comes back with the
// patch that injects it, or untouched (see skip), or refused when its
// annotations ask what cannot be done or the spoke has no trust material
// yet. Anything else is allowed untouched.
func (in *Injector) Review(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Resource != podResource || req.SubResource != "" || req.Operation != admissionv1.Create {
		in.pods.WithLabelValues(resultNotPodCreate).Inc()
		return admission.Allow()
	}
	// Case-sensitive, as the API server reads objects: the patch's paths
	// must name the keys the object has.
	var pod corev1.Pod
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &pod); err != nil {
		in.pods.WithLabelValues(resultRefused).Inc()
		return admission.Deny("the sidecar injector cannot read the pod: "+admission.Clip(err.Error()), "", "")
	}
	var top struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	_ = sigsjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &top) // read above
	ns := req.Namespace
	if result, why := in.skip(ns, &pod); result != "" {
		in.pods.WithLabelValues(result).Inc()
		in.log.Debug("pod not injected", "namespace", ns, "pod", podName(&pod), "why", why)
		return admission.Allow()
	}
	if len(pod.Spec.Containers) == 0 {
		in.pods.WithLabelValues(resultRefused).Inc()
		return admission.Deny("the sidecar injector refuses the pod: spec.containers: the pod has no containers", "spec.containers", "the pod has no containers")
	}
	p, warnings, r := in.inject(&pod, ns, len(top.Metadata) == 0 || string(top.Metadata) == "null")
	if r != nil {
		in.pods.WithLabelValues(resultRefused).Inc()
		in.log.Info("pod refused by the sidecar injector", "namespace", ns, "pod", podName(&pod), "field", r.field, "reason", r.reason)
		return admission.Deny("the sidecar injector refuses the pod: "+r.Error(), r.field, r.reason)
	}
	body, err := p.marshal()
	if err != nil {
		in.pods.WithLabelValues(resultRefused).Inc()
		return admission.Deny("the sidecar injector could not encode its patch: "+err.Error(), "", "")
	}
	in.pods.WithLabelValues(resultInjected).Inc()
	in.log.Debug("pod injected", "namespace", ns, "pod", podName(&pod), "operations", len(p.ops))
	resp := admission.Allow(warnings...)
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = body, &pt
	return resp
}

// inject builds the patch injecting pod of namespace, with warnings, or
// the reason it cannot be.
func (in *Injector) inject(pod *corev1.Pod, namespace string, noMetadata bool) (*patch, []string, *refusal) {
	template, r := parseTemplates(pod.Annotations)
	if r != nil {
		return nil, nil, r
	}
	s, r := in.parseSettings(pod, template)
	if r != nil {
		return nil, nil, r
	}
	s.network = in.network(pod, namespace)
	var err error
	rewrite, r := rewriteProbesWanted(pod.Annotations, !in.opts.KeepAppProbes)
	if r != nil {
		return nil, nil, r
	}
	if template == TemplateGateway {
		rewrite = false // Envoy is the app; its readiness is the agent's
	}
	var rewrites []probeRewrite
	if rewrite {
		var probers appprobe.Probers
		var w []string
		rewrites, probers, w = rewriteProbes(pod)
		s.warnings = append(s.warnings, w...)
		if len(probers) > 0 {
			if s.appProbes, err = probers.Marshal(); err != nil {
				return nil, nil, &refusal{reason: "the injector could not encode the app probes: " + err.Error()}
			}
		}
	}
	trust, err := in.opts.Trust()
	if err != nil {
		return nil, nil, &refusal{reason: "the spoke cannot give pods their mesh identity yet: " + err.Error()}
	}
	b := in.build(s, trust)
	warnings := s.warnings
	p := &patch{}
	if noMetadata {
		p.add("/metadata", map[string]string{})
	}

	insert(p, "/spec/initContainers", len(pod.Spec.InitContainers), b.initContainers)
	if b.gateway != nil {
		w, r := in.fillGateway(p, pod, b.gateway)
		if r != nil {
			return nil, nil, r
		}
		warnings = append(warnings, w...)
	}
	if b.appEnv != nil {
		appEnv := append(b.appEnv, csmEnv(pod, in.opts.Mesh)...)
		for i, c := range pod.Spec.Containers {
			base := fmt.Sprintf("/spec/containers/%d", i)
			var add []corev1.EnvVar
			for _, ev := range appEnv {
				if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == ev.Name }) {
					warnings = append(warnings, fmt.Sprintf("container %s sets %s itself: left as is", c.Name, ev.Name))
				} else {
					add = append(add, ev)
				}
			}
			if len(add) > 0 {
				appendTo(p, base+"/env", len(c.Env), add)
			}
			if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == b.appMount.MountPath }) {
				warnings = append(warnings, fmt.Sprintf("container %s mounts something at %s: the agent's files are not mounted there", c.Name, b.appMount.MountPath))
			} else {
				appendTo(p, base+"/volumeMounts", len(c.VolumeMounts), []corev1.VolumeMount{*b.appMount})
			}
		}
	}
	for _, rw := range rewrites {
		p.add(rw.path, rw.probe) // add replaces an existing member (RFC 6902)
	}
	for _, v := range b.volumes {
		if slices.ContainsFunc(pod.Spec.Volumes, func(o corev1.Volume) bool { return o.Name == v.Name }) {
			return nil, nil, &refusal{field: "spec.volumes", reason: "the pod already has a volume " + v.Name + ", which the injector adds"}
		}
	}
	appendTo(p, "/spec/volumes", len(pod.Spec.Volumes), b.volumes)
	if pod.Spec.ServiceAccountName == "" {
		// What the ServiceAccount admission plugin does before the
		// webhooks where it runs: the projected token needs an account.
		sa := pod.Spec.DeprecatedServiceAccount
		if sa == "" {
			sa = "default"
		}
		p.add("/spec/serviceAccountName", sa)
	}
	for _, c := range pod.Spec.Containers {
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil && *c.SecurityContext.RunAsUser == int64(s.capture.ProxyUID) && template == TemplateSidecar {
			warnings = append(warnings, fmt.Sprintf("container %s runs as uid %d, the proxy's: its traffic is not captured", c.Name, s.capture.ProxyUID))
		}
	}

	labels := map[string]string{}
	var order []string
	setLabel := func(k, v string) {
		if _, ok := pod.Labels[k]; !ok && v != "" && len(validation.IsValidLabelValue(v)) == 0 {
			labels[k] = v
			order = append(order, k)
		}
	}
	name, rev := canonical(pod)
	if template != TemplateGateway {
		// A gateway takes its clients' traffic as they send it (Istio's
		// gateway template sets no TLS mode either).
		setLabel(LabelTLSMode, "istio")
	}
	// As Istio's injector: the pod is labelled with its proxy's network.
	setLabel(meshconfig.NetworkLabel, s.network)
	setLabel(LabelCanonicalName, name)
	setLabel(LabelCanonicalRevision, rev)
	setKeys(p, "/metadata/labels", pod.Labels != nil, labels, order)

	st := statusValue{Templates: []string{template}, InitContainers: []string{}, Containers: []string{}, Revision: in.opts.Revision}
	for _, c := range b.initContainers {
		st.InitContainers = append(st.InitContainers, c.Name)
	}
	for _, v := range b.volumes {
		st.Volumes = append(st.Volumes, v.Name)
	}
	if b.gateway != nil {
		st.Containers = append(st.Containers, GatewayContainer)
	}
	status, _ := json.Marshal(st) // plain strings
	setKeys(p, "/metadata/annotations", pod.Annotations != nil, map[string]string{AnnotationStatus: string(status)}, []string{AnnotationStatus})
	return p, warnings, nil
}

// network is the network of the pod's proxy, as Istio's injector
// resolves it: the pod's topology.istio.io/network label, else (Istio
// takes its install's network here) its namespace's label, else the
// spoke's network.
func (in *Injector) network(pod *corev1.Pod, namespace string) string {
	if nw := pod.Labels[meshconfig.NetworkLabel]; nw != "" {
		return nw
	}
	if in.opts.Network != nil {
		return in.opts.Network(namespace)
	}
	return ""
}

// canonical names the pod's workload and its revision as Istio does: its
// labels first, then its owner.
func canonical(pod *corev1.Pod) (name, revision string) {
	return xdsbootstrap.CanonicalService(pod.Labels, workloadName(pod)), xdsbootstrap.CanonicalRevision(pod.Labels)
}

// workloadName is the name of what made the pod: a ReplicaSet's
// Deployment (its name without the last dash-separated part), another
// controller's own name, or the pod's name.
func workloadName(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		if o.Controller == nil || !*o.Controller {
			continue
		}
		if o.Kind == "ReplicaSet" {
			if i := strings.LastIndexByte(o.Name, '-'); i > 0 {
				return o.Name[:i]
			}
		}
		return o.Name
	}
	if pod.Name != "" {
		return pod.Name
	}
	return strings.TrimSuffix(pod.GenerateName, "-")
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}

// Status is what /debug/inject shows: what pods get and whether the
// spoke can inject now. A plain value.
type Status struct {
	Revision      string `json:"revision"`
	ProxyImage    string `json:"proxyImage"`
	RAAddress     string `json:"raAddress"`
	XDSAddress    string `json:"xdsAddress"`
	XDSServerName string `json:"xdsServerName,omitempty"`
	TrustDomain   string `json:"trustDomain,omitempty"`
	// RewriteAppProbes: pods' probes are rewritten to the agent unless
	// their annotation says otherwise.
	RewriteAppProbes bool `json:"rewriteAppProbes"`
	// NotReady says why pods to inject are refused now ("" when they are
	// injected).
	NotReady string `json:"notReady,omitempty"`
}

// Status returns the Injector's view.
func (in *Injector) Status() Status {
	st := Status{Revision: in.opts.Revision, ProxyImage: in.opts.ProxyImage, RAAddress: in.opts.RAAddress,
		XDSAddress: in.opts.XDSAddress, XDSServerName: in.opts.XDSServerName, RewriteAppProbes: !in.opts.KeepAppProbes}
	if t, err := in.opts.Trust(); err != nil {
		st.NotReady = err.Error()
	} else {
		st.TrustDomain = t.TrustDomain
	}
	return st
}
