package policy

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// TrafficSide is the side of traffic a Telemetry setting applies to
// (Istio's WorkloadMode): a sidecar's outbound listeners and a gateway's
// are the client side, a sidecar's inbound listeners the server side.
type TrafficSide int

// Traffic sides.
const (
	ClientSide TrafficSide = iota
	ServerSide
)

// Istio's built-in extension providers, present in every mesh unless the
// MeshConfig defines a provider of the same name (Istio's mesh defaults).
var (
	builtinPrometheus = &meshv1alpha1.MeshConfig_ExtensionProvider{Name: "prometheus",
		Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Prometheus{Prometheus: &meshv1alpha1.MeshConfig_ExtensionProvider_PrometheusMetricsProvider{}}}
	builtinEnvoyLog = &meshv1alpha1.MeshConfig_ExtensionProvider{Name: "envoy",
		Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog{EnvoyFileAccessLog: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider{Path: "/dev/stdout"}}}
)

// ExtensionProvider resolves a provider name as Istio does: the
// MeshConfig's extensionProviders, then the built-in "prometheus" and
// "envoy" (a file access log to /dev/stdout). Nil when unknown.
func ExtensionProvider(s *mesh.Snapshot, name string) *meshv1alpha1.MeshConfig_ExtensionProvider {
	if p := s.ExtensionProvider(name); p != nil {
		return p
	}
	switch strings.ToLower(name) {
	case builtinPrometheus.Name:
		return builtinPrometheus
	case builtinEnvoyLog.Name:
		return builtinEnvoyLog
	}
	return nil
}

// defaultProviders is the MeshConfig's defaultProviders, with Istio's
// default (metrics: prometheus) when the MeshConfig sets none.
func defaultProviders(s *mesh.Snapshot) *meshv1alpha1.MeshConfig_DefaultProviders {
	if dp := s.MeshConfig.GetDefaultProviders(); dp != nil {
		return dp
	}
	return &meshv1alpha1.MeshConfig_DefaultProviders{Metrics: []string{builtinPrometheus.Name}}
}

// AccessLog is one access log a proxy writes on one side of traffic.
type AccessLog struct {
	Provider *meshv1alpha1.MeshConfig_ExtensionProvider
	// Filter is a CEL expression: only matching requests are logged.
	Filter string
}

// Tracing is how a proxy traces one side of traffic.
type Tracing struct {
	Provider *meshv1alpha1.MeshConfig_ExtensionProvider
	// Sampling is the percentage of requests sampled (0–100).
	Sampling float64
	// CustomTags are the tags added to every span, by name.
	CustomTags                   map[string]*telemetry.Tracing_CustomTag
	UseRequestIDForTraceSampling bool
}

// MetricOverride changes one metric (its Prometheus name without the
// istio_ prefix, or a custom metric's name) of Istio's stats filter.
type MetricOverride struct {
	Metric   string
	Disabled bool
	// Tags upserts (a value expression) or removes (Remove) dimensions.
	Tags map[string]*telemetry.MetricsOverrides_TagOverride
}

// Metrics is one metrics provider a proxy reports to on one side.
type Metrics struct {
	Provider  *meshv1alpha1.MeshConfig_ExtensionProvider
	Overrides []MetricOverride
}

// Telemetry is what the Telemetry objects (and the MeshConfig's default
// providers) of a mesh make of one workload, per side of traffic. It is
// immutable once returned.
type Telemetry struct {
	// Sources are the applied Telemetry objects in precedence order
	// (root namespace, namespace, workload).
	Sources    []*mesh.Config
	AccessLogs [2][]AccessLog
	// Tracing is nil on a side that is not traced.
	Tracing [2]*Tracing
	Metrics [2][]Metrics
}

// DefaultTraceSampling is Istio's sampling percentage when neither a
// Telemetry nor the provider sets one (PILOT_TRACE_SAMPLING's default).
const DefaultTraceSampling = 1.0

// SelectTelemetries returns the Telemetry objects that apply to a
// workload in namespace with labels, in Istio's precedence order (later
// overrides earlier): the root namespace's namespace-wide one, the
// workload's namespace's namespace-wide one, then those of the workload's
// namespace that select it (by selector, or by a targetRef naming the
// Gateway whose deployment it is). A namespace with several namespace-wide
// Telemetries uses the first by name and reports the others.
func SelectTelemetries(s *mesh.Snapshot, namespace string, labels map[string]string, report func(mesh.Problem)) []*mesh.Config {
	if report == nil {
		report = func(mesh.Problem) {}
	}
	root := s.RootNamespace()
	var rootWide, nsWide *mesh.Config
	var selected []*mesh.Config
	for _, c := range s.Telemetries {
		ns := c.Object.Namespace
		if ns != namespace && ns != root {
			continue
		}
		t, _ := c.Object.Spec.(*telemetry.Telemetry)
		refs := t.GetTargetRefs()
		if t.GetTargetRef() != nil {
			refs = append([]*typev1beta1.PolicyTargetReference{t.GetTargetRef()}, refs...)
		}
		switch {
		case len(refs) > 0:
			if ns != namespace {
				continue // Istio attaches by targetRef in the workload's namespace only
			}
			for i, r := range refs {
				if r.GetKind() != "Gateway" || (r.GetGroup() != "" && r.GetGroup() != "gateway.networking.k8s.io") {
					report(mesh.Problem{Resource: c.Ref(), Field: fmt.Sprintf("spec.targetRefs[%d]", i),
						Reason: fmt.Sprintf("a targetRef to a %s %s/%s is not supported (only a Gateway of gateway.networking.k8s.io); it is ignored", r.GetGroup(), r.GetKind(), r.GetName())})
					continue
				}
				if labels[meshconfig.GatewayNameLabel] == r.GetName() {
					selected = append(selected, c)
					break
				}
			}
		case len(t.GetSelector().GetMatchLabels()) > 0:
			if ns == namespace && mesh.Matches(t.GetSelector().GetMatchLabels(), labels) {
				selected = append(selected, c)
			}
		default:
			wide := &nsWide
			if ns == root {
				wide = &rootWide
			}
			if *wide != nil {
				report(mesh.Problem{Resource: c.Ref(), Field: "spec.selector",
					Reason: fmt.Sprintf("namespace %s already has the namespace-wide Telemetry %s; this one is ignored", ns, (*wide).Ref())})
				continue
			}
			*wide = c
		}
	}
	var out []*mesh.Config
	if rootWide != nil {
		out = append(out, rootWide)
	}
	if nsWide != nil && namespace != root {
		out = append(out, nsWide)
	}
	return append(out, selected...)
}

// SelectTelemetry resolves what the Telemetry objects applying to a
// workload (SelectTelemetries) and the MeshConfig's defaultProviders
// configure, as Istio merges them. A provider that is not defined, or of
// a kind nave does not generate for the aspect, is reported and left out.
func SelectTelemetry(s *mesh.Snapshot, namespace string, labels map[string]string, report func(mesh.Problem)) *Telemetry {
	if report == nil {
		report = func(mesh.Problem) {}
	}
	t := &Telemetry{Sources: SelectTelemetries(s, namespace, labels, report)}
	specs := make([]*telemetry.Telemetry, len(t.Sources))
	for i, c := range t.Sources {
		specs[i], _ = c.Object.Spec.(*telemetry.Telemetry)
	}
	dp := defaultProviders(s)
	for _, side := range []TrafficSide{ClientSide, ServerSide} {
		t.AccessLogs[side] = accessLogs(s, t.Sources, specs, dp.GetAccessLogging(), side, report)
		t.Tracing[side] = tracing(s, t.Sources, specs, dp.GetTracing(), side, report)
		t.Metrics[side] = metrics(s, t.Sources, specs, dp.GetMetrics(), side, report)
	}
	return t
}

// sideMatches reports whether a selector's mode covers side.
func sideMatches(mode telemetry.WorkloadMode, side TrafficSide) bool {
	switch mode {
	case telemetry.WorkloadMode_CLIENT:
		return side == ClientSide
	case telemetry.WorkloadMode_SERVER:
		return side == ServerSide
	}
	return true
}

func providerNames(refs []*telemetry.ProviderRef) []string {
	names := make([]string, 0, len(refs))
	for _, r := range refs {
		names = append(names, r.GetName())
	}
	return names
}

// accessLogs merges access logging as Istio does: without any
// accessLogging the default providers log; otherwise the providers in
// scope are those the last level naming providers names (or the
// defaults), each enabled or disabled by the last entry covering it.
func accessLogs(s *mesh.Snapshot, sources []*mesh.Config, specs []*telemetry.Telemetry, defaults []string, side TrafficSide, report func(mesh.Problem)) []AccessLog {
	type state struct {
		filter   string
		disabled bool
	}
	providers := map[string]state{}
	configured := false
	for _, spec := range specs {
		configured = configured || len(spec.GetAccessLogging()) > 0
	}
	if !configured {
		for _, name := range defaults {
			providers[name] = state{}
		}
	} else {
		scope := defaults
		filters := map[string]string{}
		for _, spec := range specs {
			var names []string
			for _, l := range spec.GetAccessLogging() {
				if !sideMatches(l.GetMatch().GetMode(), side) {
					continue
				}
				for _, n := range providerNames(l.GetProviders()) {
					if !slices.Contains(names, n) {
						names = append(names, n)
					}
					filters[n] = l.GetFilter().GetExpression()
				}
			}
			if len(names) > 0 {
				scope = names
			}
		}
		parent := defaults
		for _, spec := range specs {
			for _, l := range spec.GetAccessLogging() {
				names := providerNames(l.GetProviders())
				if len(names) == 0 {
					names = parent
				}
				parent = names
				if !sideMatches(l.GetMatch().GetMode(), side) {
					continue
				}
				for _, n := range names {
					if !slices.Contains(scope, n) {
						continue
					}
					providers[n] = state{filter: filters[n], disabled: l.GetDisabled().GetValue()}
				}
			}
		}
	}
	var out []AccessLog
	for _, name := range slices.Sorted(maps.Keys(providers)) {
		st := providers[name]
		if st.disabled {
			continue
		}
		p := resolveProvider(s, sources, name, "accessLogging", report)
		if p == nil {
			continue
		}
		switch p.GetProvider().(type) {
		case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog,
			*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyOtelAls,
			*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyHttpAls,
			*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyTcpAls:
			out = append(out, AccessLog{Provider: p, Filter: st.filter})
		default:
			reportProvider(sources, name, "accessLogging", fmt.Sprintf("provider %q is a %s provider, which nave cannot use for access logs (envoyFileAccessLog, envoyOtelAls, envoyHttpAls or envoyTcpAls); no access log is written to it", name, providerKind(p)), report)
		}
	}
	return out
}

// tracing merges tracing as Istio does: the first default provider, then
// each entry covering side in order overrides the provider (its first),
// sampling, span reporting and custom tags it sets. Nil: not traced.
func tracing(s *mesh.Snapshot, sources []*mesh.Config, specs []*telemetry.Telemetry, defaults []string, side TrafficSide, report func(mesh.Problem)) *Tracing {
	provider := ""
	if len(defaults) > 0 {
		provider = defaults[0]
	}
	tr := &Tracing{Sampling: DefaultTraceSampling, UseRequestIDForTraceSampling: true}
	disabled := false
	for _, spec := range specs {
		for _, e := range spec.GetTracing() {
			if !sideMatches(e.GetMatch().GetMode(), side) {
				continue
			}
			if names := providerNames(e.GetProviders()); len(names) > 0 {
				provider = names[0]
			}
			if e.GetDisableSpanReporting() != nil {
				disabled = e.GetDisableSpanReporting().GetValue()
			}
			if e.GetCustomTags() != nil {
				tr.CustomTags = e.GetCustomTags()
			}
			if e.GetRandomSamplingPercentage() != nil {
				tr.Sampling = e.GetRandomSamplingPercentage().GetValue()
			}
			if e.GetUseRequestIdForTraceSampling() != nil {
				tr.UseRequestIDForTraceSampling = e.GetUseRequestIdForTraceSampling().GetValue()
			}
		}
	}
	if disabled || provider == "" {
		return nil
	}
	p := resolveProvider(s, sources, provider, "tracing", report)
	if p == nil {
		return nil
	}
	switch p.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Opentelemetry, *meshv1alpha1.MeshConfig_ExtensionProvider_Zipkin:
	default:
		reportProvider(sources, provider, "tracing", fmt.Sprintf("provider %q is a %s provider; nave traces with opentelemetry and zipkin providers only; nothing is traced", provider, providerKind(p)), report)
		return nil
	}
	tr.Provider = p
	return tr
}

// metrics merges metrics as Istio does: the providers in scope are those
// the last entry naming providers names (or the defaults); overrides
// apply in order, later ones over earlier ones, per metric and tag; a
// provider whose metrics are all disabled on side is left out.
func metrics(s *mesh.Snapshot, sources []*mesh.Config, specs []*telemetry.Telemetry, defaults []string, side TrafficSide, report func(mesh.Problem)) []Metrics {
	var entries []*telemetry.Metrics
	for _, spec := range specs {
		entries = append(entries, spec.GetMetrics()...)
	}
	scope := defaults
	for _, m := range entries {
		if names := providerNames(m.GetProviders()); len(names) > 0 {
			scope = names
		}
	}
	type provState struct {
		allDisabled bool
		order       []string
		overrides   map[string]*MetricOverride
	}
	states := map[string]*provState{}
	if len(entries) == 0 {
		for _, n := range defaults {
			states[n] = &provState{overrides: map[string]*MetricOverride{}}
		}
	}
	parent := defaults
	for _, m := range entries {
		names := providerNames(m.GetProviders())
		if len(names) == 0 {
			names = parent
		}
		parent = names
		for _, n := range names {
			if !slices.Contains(scope, n) {
				continue
			}
			st := states[n]
			if st == nil {
				st = &provState{overrides: map[string]*MetricOverride{}}
				states[n] = st
			}
			for _, o := range m.GetOverrides() {
				if !sideMatches(o.GetMatch().GetMode(), side) {
					continue
				}
				name := metricName(o.GetMatch())
				if name == "" && o.GetDisabled().GetValue() {
					st.allDisabled = true
					continue
				}
				st.allDisabled = false
				targets := []string{name}
				if name == "" {
					targets = allMetrics
				}
				for _, mn := range targets {
					mo := st.overrides[mn]
					if mo == nil {
						mo = &MetricOverride{Metric: mn}
						st.overrides[mn] = mo
						st.order = append(st.order, mn)
					}
					if o.GetDisabled() != nil {
						mo.Disabled = o.GetDisabled().GetValue()
					}
					for tag, to := range o.GetTagOverrides() {
						if mo.Tags == nil {
							mo.Tags = map[string]*telemetry.MetricsOverrides_TagOverride{}
						}
						mo.Tags[tag] = to
					}
				}
			}
		}
	}
	var out []Metrics
	for _, n := range slices.Sorted(maps.Keys(states)) {
		st := states[n]
		if st.allDisabled {
			continue
		}
		p := resolveProvider(s, sources, n, "metrics", report)
		if p == nil {
			continue
		}
		if _, ok := p.GetProvider().(*meshv1alpha1.MeshConfig_ExtensionProvider_Prometheus); !ok {
			reportProvider(sources, n, "metrics", fmt.Sprintf("provider %q is a %s provider; nave reports metrics for prometheus providers only; it is ignored", n, providerKind(p)), report)
			continue
		}
		m := Metrics{Provider: p}
		sort.Strings(st.order)
		for _, mn := range st.order {
			m.Overrides = append(m.Overrides, *st.overrides[mn])
		}
		out = append(out, m)
	}
	return out
}

// istioMetrics maps Istio's metric selector names to the stats filter's
// metric names (Istio's metricToPrometheusMetric).
var istioMetrics = map[telemetry.MetricSelector_IstioMetric]string{
	telemetry.MetricSelector_REQUEST_COUNT:          "requests_total",
	telemetry.MetricSelector_REQUEST_DURATION:       "request_duration_milliseconds",
	telemetry.MetricSelector_REQUEST_SIZE:           "request_bytes",
	telemetry.MetricSelector_RESPONSE_SIZE:          "response_bytes",
	telemetry.MetricSelector_TCP_OPENED_CONNECTIONS: "tcp_connections_opened_total",
	telemetry.MetricSelector_TCP_CLOSED_CONNECTIONS: "tcp_connections_closed_total",
	telemetry.MetricSelector_TCP_SENT_BYTES:         "tcp_sent_bytes_total",
	telemetry.MetricSelector_TCP_RECEIVED_BYTES:     "tcp_received_bytes_total",
	telemetry.MetricSelector_GRPC_REQUEST_MESSAGES:  "request_messages_total",
	telemetry.MetricSelector_GRPC_RESPONSE_MESSAGES: "response_messages_total",
}

// allMetrics is every standard metric's name, sorted.
var allMetrics = func() []string {
	var out []string
	for _, n := range istioMetrics {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}()

// metricName is the stats filter's name of the selected metric; "" for
// ALL_METRICS.
func metricName(m *telemetry.MetricSelector) string {
	if c := m.GetCustomMetric(); c != "" {
		return c
	}
	return istioMetrics[m.GetMetric()]
}

// resolveProvider finds a provider the Telemetries name, reporting an
// unknown one against the Telemetries that name it.
func resolveProvider(s *mesh.Snapshot, sources []*mesh.Config, name, aspect string, report func(mesh.Problem)) *meshv1alpha1.MeshConfig_ExtensionProvider {
	p := ExtensionProvider(s, name)
	if p == nil {
		reportProvider(sources, name, aspect, fmt.Sprintf("provider %q is not among the MeshConfig's extensionProviders; it is ignored", name), report)
	}
	return p
}

// reportProvider reports a problem with a provider against the first
// source that names it (or the MeshConfig, when it comes from
// defaultProviders).
func reportProvider(sources []*mesh.Config, name, aspect, reason string, report func(mesh.Problem)) {
	for _, c := range sources {
		t, _ := c.Object.Spec.(*telemetry.Telemetry)
		if strings.Contains(protoText(t, aspect), `"`+name+`"`) {
			report(mesh.Problem{Resource: c.Ref(), Field: "spec." + aspect, Reason: reason})
			return
		}
	}
	report(mesh.Problem{Resource: "MeshConfig", Field: "meshConfig.defaultProviders." + aspect, Reason: reason})
}

// protoText lists the provider names an aspect of t refers to, quoted.
func protoText(t *telemetry.Telemetry, aspect string) string {
	var names []string
	switch aspect {
	case "accessLogging":
		for _, l := range t.GetAccessLogging() {
			names = append(names, providerNames(l.GetProviders())...)
		}
	case "tracing":
		for _, e := range t.GetTracing() {
			names = append(names, providerNames(e.GetProviders())...)
		}
	case "metrics":
		for _, m := range t.GetMetrics() {
			names = append(names, providerNames(m.GetProviders())...)
		}
	}
	return `"` + strings.Join(names, `","`) + `"`
}

// providerKind names a provider's kind by its JSON field name.
func providerKind(p *meshv1alpha1.MeshConfig_ExtensionProvider) string {
	m := p.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("provider")); fd != nil {
		return fd.JSONName()
	}
	return "unknown"
}

// TracingConfigured reports whether any proxy of the snapshot may be
// traced: a Telemetry exists or the MeshConfig names default tracing
// providers. Only then do a proxy's canonical service labels shape its
// config (the trace service name).
func TracingConfigured(s *mesh.Snapshot) bool {
	return len(s.Telemetries) > 0 || len(s.MeshConfig.GetDefaultProviders().GetTracing()) > 0
}
