package inject

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/navemesh/nave/spoke/admission"
	"github.com/navemesh/nave/spoke/agentconfig"
	"github.com/navemesh/nave/spoke/capture"
)

// Templates.
const (
	TemplateSidecar   = "sidecar"
	TemplateGRPCAgent = "grpc-agent"
	// TemplateGateway fills the pod's container named istio-proxy (image
	// auto) with nave-agent running Envoy as a gateway (gateway.go).
	TemplateGateway = "gateway"
)

// Pod annotations honoured (docs/injection.md).
const (
	AnnotationExcludeOutboundPorts  = "traffic.sidecar.istio.io/excludeOutboundPorts"
	AnnotationExcludeInboundPorts   = "traffic.sidecar.istio.io/excludeInboundPorts"
	AnnotationIncludeInboundPorts   = "traffic.sidecar.istio.io/includeInboundPorts"
	AnnotationIncludeOutboundRanges = "traffic.sidecar.istio.io/includeOutboundIPRanges"
	AnnotationExcludeOutboundRanges = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
	AnnotationProxyImage            = "sidecar.istio.io/proxyImage"
	AnnotationProxyCPU              = "sidecar.istio.io/proxyCPU"
	AnnotationProxyMemory           = "sidecar.istio.io/proxyMemory"
	AnnotationProxyCPULimit         = "sidecar.istio.io/proxyCPULimit"
	AnnotationProxyMemoryLimit      = "sidecar.istio.io/proxyMemoryLimit"
)

// ignored are Istio annotations the injector does not honour, with the
// warning a pod carrying one gets back.
var ignored = map[string]string{
	"sidecar.istio.io/interceptionMode":           "the capture is REDIRECT only",
	"traffic.sidecar.istio.io/excludeInterfaces":  "the capture applies to every interface",
	"traffic.sidecar.istio.io/kubevirtInterfaces": "the capture applies to every interface",
	"status.sidecar.istio.io/port":                "the agent's status port is 15021",
	"sidecar.istio.io/bootstrapOverride":          "the agent writes the bootstrap",
	"sidecar.istio.io/userVolume":                 "user volumes are not added to the proxy",
	"sidecar.istio.io/userVolumeMount":            "user volumes are not added to the proxy",
	"sidecar.istio.io/agentLogLevel":              "the agent's log level is its own default",
	"sidecar.istio.io/logLevel":                   "Envoy's log level is the agent's default",
}

// Ports the capture never redirects inbound: the agent's status port
// (probes, metrics), Envoy's admin port and its readiness listener.
var alwaysExcludedInbound = []int{envoyAdminPort, envoyReadyPort, statusPort}

// Default resources of the injected containers (Istio's for the proxy).
var (
	defaultProxyCPU      = resource.MustParse("100m")
	defaultProxyMemory   = resource.MustParse("128Mi")
	defaultAgentCPU      = resource.MustParse("10m")
	defaultAgentMemory   = resource.MustParse("32Mi")
	defaultCaptureCPU    = resource.MustParse("10m")
	defaultCaptureMemory = resource.MustParse("16Mi")
)

// refusal is a pod the injector will not admit: the field and why.
type refusal struct{ field, reason string }

func (r *refusal) Error() string {
	if r.field == "" {
		return r.reason
	}
	return r.field + ": " + r.reason
}

func annotationField(key string) string { return "metadata.annotations[" + key + "]" }

func refuse(key, format string, args ...any) *refusal {
	return &refusal{field: annotationField(key), reason: fmt.Sprintf(format, args...)}
}

// podSettings are what a pod's annotations ask of its injection.
type podSettings struct {
	template  string
	network   string // the proxy's network (node metadata NETWORK), "" for none
	image     string
	appProbes string // the original app probes for the agent (JSON), "" for none
	proxy     proxySettings
	capture   capture.Config
	resources corev1.ResourceRequirements
	warnings  []string
}

// parseTemplates reads inject.istio.io/templates: one of the templates,
// default sidecar. Istio composes several; the three here exclude each
// other.
func parseTemplates(ann map[string]string) (string, *refusal) {
	v, ok := ann[AnnotationTemplates]
	if !ok || strings.TrimSpace(v) == "" {
		return TemplateSidecar, nil
	}
	var names []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, n := range names {
		if n != TemplateSidecar && n != TemplateGRPCAgent && n != TemplateGateway {
			return "", refuse(AnnotationTemplates, "unknown template %q: this spoke injects %q (Envoy sidecar), %q (proxyless gRPC) or %q (Envoy gateway)",
				admission.Clip(n), TemplateSidecar, TemplateGRPCAgent, TemplateGateway)
		}
	}
	if len(names) > 1 {
		return "", refuse(AnnotationTemplates, "templates %q and %q exclude each other: choose one", names[0], names[1])
	}
	return names[0], nil
}

// parseSettings reads the annotations of pod for template.
func (in *Injector) parseSettings(pod *corev1.Pod, template string) (*podSettings, *refusal) {
	ann := pod.Annotations
	s := &podSettings{template: template, image: in.opts.ProxyImage, capture: capture.Default()}
	if v := strings.TrimSpace(ann[AnnotationProxyImage]); v != "" {
		s.image = v
	}
	cpu, mem := defaultProxyCPU, defaultProxyMemory
	if template == TemplateGRPCAgent {
		cpu, mem = defaultAgentCPU, defaultAgentMemory
	}
	s.resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}}
	for _, q := range []struct {
		key  string
		list *corev1.ResourceList
		name corev1.ResourceName
	}{
		{AnnotationProxyCPU, &s.resources.Requests, corev1.ResourceCPU},
		{AnnotationProxyMemory, &s.resources.Requests, corev1.ResourceMemory},
		{AnnotationProxyCPULimit, &s.resources.Limits, corev1.ResourceCPU},
		{AnnotationProxyMemoryLimit, &s.resources.Limits, corev1.ResourceMemory},
	} {
		v, ok := ann[q.key]
		if !ok {
			continue
		}
		qty, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil || qty.Sign() <= 0 {
			return nil, refuse(q.key, "%q is not a positive quantity (e.g. 100m for CPU, 128Mi for memory)", admission.Clip(v))
		}
		if *q.list == nil {
			*q.list = corev1.ResourceList{}
		}
		(*q.list)[q.name] = qty
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if l, ok := s.resources.Limits[name]; ok && l.Cmp(s.resources.Requests[name]) < 0 {
			s.resources.Requests[name] = l // a limit below the default request lowers the request
		}
	}

	captureKeys := []string{AnnotationExcludeOutboundPorts, AnnotationExcludeInboundPorts, AnnotationIncludeInboundPorts,
		AnnotationIncludeOutboundRanges, AnnotationExcludeOutboundRanges}
	if template != TemplateSidecar {
		for _, k := range captureKeys {
			if _, ok := ann[k]; ok {
				s.warnings = append(s.warnings, fmt.Sprintf("annotation %s is ignored: template %s captures no traffic", k, template))
			}
		}
	} else if r := parseCapture(ann, &s.capture); r != nil {
		return nil, r
	}
	pc, r := parseProxyConfig(ann)
	if r != nil {
		return nil, r
	}
	var mesh *meshv1alpha1.ProxyConfig
	if in.opts.MeshConfig != nil {
		mesh = in.opts.MeshConfig().GetDefaultConfig()
	}
	ps, w, r := resolveProxyConfig(mesh, pc)
	if r != nil {
		return nil, r
	}
	s.proxy = ps
	s.warnings = append(s.warnings, w...)
	if on, _ := strconv.ParseBool(ps.metadata[agentconfig.MetaDNSCapture]); on && template == TemplateSidecar {
		// The agent answers DNS (docs/dns.md): the capture sends it the
		// pod's queries, as Istio's istio-init --redirect-dns does. The
		// grpc-agent and gateway templates capture nothing.
		s.capture.RedirectDNS = true
	}
	keys := make([]string, 0, len(ignored))
	for k := range ann {
		if _, ok := ignored[k]; ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		s.warnings = append(s.warnings, fmt.Sprintf("annotation %s is ignored: %s", k, ignored[k]))
	}
	return s, nil
}

// parseCapture reads the traffic.sidecar.istio.io annotations into c.
func parseCapture(ann map[string]string, c *capture.Config) *refusal {
	ports := func(key string) ([]int, *refusal) {
		ps, err := capture.ParsePorts(ann[key])
		if err != nil {
			return nil, refuse(key, "%v", err)
		}
		return ps, nil
	}
	var r *refusal
	if c.ExcludeOutboundPorts, r = ports(AnnotationExcludeOutboundPorts); r != nil {
		return r
	}
	var ex []int
	if ex, r = ports(AnnotationExcludeInboundPorts); r != nil {
		return r
	}
	ex = append(ex, alwaysExcludedInbound...)
	slices.Sort(ex)
	c.ExcludeInboundPorts = slices.Compact(ex)
	if v, ok := ann[AnnotationIncludeInboundPorts]; ok && strings.TrimSpace(v) != capture.All {
		c.InboundAllPorts = false
		if c.InboundPorts, r = ports(AnnotationIncludeInboundPorts); r != nil {
			return r
		}
	}
	if v, ok := ann[AnnotationIncludeOutboundRanges]; ok && strings.TrimSpace(v) != capture.All {
		rs, err := capture.ParseRanges(v)
		if err != nil {
			return refuse(AnnotationIncludeOutboundRanges, "%v", err)
		}
		c.OutboundAllRanges, c.OutboundRanges = false, rs
	}
	rs, err := capture.ParseRanges(ann[AnnotationExcludeOutboundRanges])
	if err != nil {
		return refuse(AnnotationExcludeOutboundRanges, "%v", err)
	}
	c.ExcludeOutboundRanges = rs
	return nil
}
