package envoy

import (
	"maps"
	"slices"
	"strings"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	otelalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	uuidv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/request_id/uuid/v3"
	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	otlpcommon "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	statsv1 "istio.io/api/envoy/extensions/stats"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	telemetry "istio.io/api/telemetry/v1alpha1"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// Names of the telemetry extensions (Envoy's, and Istio's filters of its
// own Envoy build).
const (
	FileAccessLog      = "envoy.access_loggers.file"
	OtelAccessLog      = "envoy.access_loggers.open_telemetry"
	HTTPGrpcAccessLog  = "envoy.access_loggers.http_grpc"
	TCPGrpcAccessLog   = "envoy.access_loggers.tcp_grpc"
	CELAccessLogFilter = "envoy.access_loggers.extension_filters.cel"
	OtelTracer         = "envoy.tracers.opentelemetry"
	ZipkinTracer       = "envoy.tracers.zipkin"
	// IstioStatsFilter and IstioMetadataExchangeFilter exist only in
	// Istio's Envoy build (decision 039).
	IstioStatsFilter            = "istio.stats"
	IstioMetadataExchangeFilter = "istio.metadata_exchange"
	peerMetadataTypeURL         = "type.googleapis.com/io.istio.http.peer_metadata.Config"
)

// IstioTextLogFormat is Istio's default access log line (EnvoyTextLogFormat
// of Istio 1.9 onwards): what an envoyFileAccessLog provider without a
// logFormat writes, and MeshConfig accessLogFile's default.
const IstioTextLogFormat = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% " +
	"%PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% " +
	"%RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% " +
	"\"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% %BYTES_SENT% " +
	"%DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" " +
	"\"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" " +
	"%UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% " +
	"%DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n"

// istioJSONLogFormat is Istio's default JSON access log (accessLogEncoding
// JSON): the text format's fields by name.
var istioJSONLogFormat = map[string]string{
	"start_time":                        "%START_TIME%",
	"route_name":                        "%ROUTE_NAME%",
	"method":                            "%REQ(:METHOD)%",
	"path":                              "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
	"protocol":                          "%PROTOCOL%",
	"response_code":                     "%RESPONSE_CODE%",
	"response_flags":                    "%RESPONSE_FLAGS%",
	"response_code_details":             "%RESPONSE_CODE_DETAILS%",
	"connection_termination_details":    "%CONNECTION_TERMINATION_DETAILS%",
	"bytes_received":                    "%BYTES_RECEIVED%",
	"bytes_sent":                        "%BYTES_SENT%",
	"duration":                          "%DURATION%",
	"upstream_service_time":             "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
	"x_forwarded_for":                   "%REQ(X-FORWARDED-FOR)%",
	"user_agent":                        "%REQ(USER-AGENT)%",
	"request_id":                        "%REQ(X-REQUEST-ID)%",
	"authority":                         "%REQ(:AUTHORITY)%",
	"upstream_host":                     "%UPSTREAM_HOST%",
	"upstream_cluster":                  "%UPSTREAM_CLUSTER_RAW%",
	"upstream_local_address":            "%UPSTREAM_LOCAL_ADDRESS%",
	"downstream_local_address":          "%DOWNSTREAM_LOCAL_ADDRESS%",
	"downstream_remote_address":         "%DOWNSTREAM_REMOTE_ADDRESS%",
	"requested_server_name":             "%REQUESTED_SERVER_NAME%",
	"upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
}

// sideTelemetry is what one side of the proxy's traffic (policy.ClientSide:
// outbound and gateway listeners; ServerSide: inbound) gets from its
// Telemetry, built once per Listeners call.
type sideTelemetry struct {
	httpLogs, tcpLogs []*accesslogv3.AccessLog
	// listenerLogs log connections no filter chain takes (MeshConfig
	// accessLogFile unless disableEnvoyListenerLog).
	listenerLogs []*accesslogv3.AccessLog
	tracing      *hcmv3.HttpConnectionManager_Tracing
	requestID    *hcmv3.RequestIDExtension
	// Istio's build only: the stats filter (HTTP and network) and the
	// HTTP metadata exchange.
	httpStats, mx *hcmv3.HttpFilter
	tcpStats      *listenerv3.Filter
}

// telemetry returns side's telemetry, built on first use.
func (b *listenerBuilder) telemetry(side policy.TrafficSide) *sideTelemetry {
	if b.tele[side] != nil {
		return b.tele[side]
	}
	t := b.v.Telemetry()
	st := &sideTelemetry{}
	logs := t.AccessLogs[side]
	if len(logs) == 0 && !configuresLogging(t.Sources) && len(b.v.Snapshot().MeshConfig.GetDefaultProviders().GetAccessLogging()) == 0 {
		// No Telemetry configures logging: MeshConfig accessLogFile, as
		// Istio's fallback.
		if path := b.v.Snapshot().MeshConfig.GetAccessLogFile(); path != "" {
			logs = []policy.AccessLog{{Provider: &meshv1alpha1.MeshConfig_ExtensionProvider{Name: "meshConfig.accessLogFile",
				Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog{EnvoyFileAccessLog: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider{Path: path}}}}}
			if !b.v.Snapshot().MeshConfig.GetDisableEnvoyListenerLog() {
				// Istio's listener access log: connections no chain took (NR).
				l, _ := b.accessLog(logs[0])
				l.Filter = &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
					ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: []string{"NR"}}}}
				st.listenerLogs = []*accesslogv3.AccessLog{l}
			}
		}
	}
	for _, l := range logs {
		http, tcp := b.accessLog(l)
		if http != nil {
			st.httpLogs = append(st.httpLogs, http)
		}
		if tcp != nil {
			st.tcpLogs = append(st.tcpLogs, tcp)
		}
	}
	if tr := t.Tracing[side]; tr != nil {
		st.tracing = b.tracing(tr)
		if st.tracing != nil {
			st.requestID = &hcmv3.RequestIDExtension{TypedConfig: build.Any(&uuidv3.UuidRequestIdConfig{
				UseRequestIdForTraceSampling: wrapperspb.Bool(tr.UseRequestIDForTraceSampling)})}
		}
	}
	if b.v.Key().IstioBuild {
		for _, m := range t.Metrics[side] {
			// Istio configures one stats filter per prometheus provider;
			// they would count twice, so the first is the one.
			cfg := build.Any(statsConfig(side, b.v.Key().Type, m))
			st.httpStats = &hcmv3.HttpFilter{Name: IstioStatsFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}
			st.tcpStats = &listenerv3.Filter{Name: IstioStatsFilter, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}
			break
		}
		st.mx = metadataExchange(side)
	}
	b.tele[side] = st
	return st
}

// configuresLogging reports whether any of the Telemetries has
// accessLogging (then MeshConfig accessLogFile no longer applies, as in
// Istio).
func configuresLogging(sources []*mesh.Config) bool {
	for _, c := range sources {
		if t, _ := c.Object.Spec.(*telemetry.Telemetry); len(t.GetAccessLogging()) > 0 {
			return true
		}
	}
	return false
}

// httpFilters returns filters (ending with the router) with side's
// telemetry filters: the metadata exchange first, the stats filter just
// before the router, as Istio orders them.
func (st *sideTelemetry) httpFilters(filters []*hcmv3.HttpFilter) []*hcmv3.HttpFilter {
	if st.mx == nil && st.httpStats == nil {
		return filters
	}
	out := make([]*hcmv3.HttpFilter, 0, len(filters)+2)
	if st.mx != nil {
		out = append(out, st.mx)
	}
	out = append(out, filters[:len(filters)-1]...)
	if st.httpStats != nil {
		out = append(out, st.httpStats)
	}
	return append(out, filters[len(filters)-1])
}

// applyHTTP sets side's access logs and tracing on an HTTP connection
// manager, and its telemetry filters around the manager's filters.
func (st *sideTelemetry) applyHTTP(hcm *hcmv3.HttpConnectionManager) {
	hcm.AccessLog = st.httpLogs
	hcm.Tracing = st.tracing
	hcm.RequestIdExtension = st.requestID
	hcm.HttpFilters = st.httpFilters(hcm.HttpFilters)
}

// addTCPStats puts side's network stats filter before each chain's
// tcp_proxy (the last filter) of a listener, and sets its listener
// access log.
func (b *listenerBuilder) addTCPStats(l *listenerv3.Listener) {
	side := policy.ClientSide
	if l.TrafficDirection == corev3.TrafficDirection_INBOUND {
		side = policy.ServerSide
	}
	l.AccessLog = b.telemetry(side).listenerLogs
	stats := b.telemetry(side).tcpStats
	if stats == nil {
		return
	}
	chains := l.FilterChains
	if l.DefaultFilterChain != nil {
		chains = append(chains[:len(chains):len(chains)], l.DefaultFilterChain)
	}
	for _, fc := range chains {
		if n := len(fc.Filters); n > 0 && fc.Filters[n-1].Name == TCPProxyFilter && (n == 1 || fc.Filters[n-2] != stats) {
			fc.Filters = append(fc.Filters[:n-1:n-1], stats, fc.Filters[n-1])
		}
	}
}

// metadataExchange is Istio's HTTP peer metadata filter for side (its
// SidecarInboundMetadataFilter and SidecarOutboundMetadataFilter).
func metadataExchange(side policy.TrafficSide) *hcmv3.HttpFilter {
	dir := "upstream"
	if side == policy.ServerSide {
		dir = "downstream"
	}
	istioHeaders := map[string]any{"istio_headers": map[string]any{}}
	cfg, err := structpb.NewStruct(map[string]any{
		dir + "_discovery":   []any{istioHeaders, map[string]any{"workload_discovery": map[string]any{}}},
		dir + "_propagation": []any{istioHeaders},
	})
	if err != nil {
		panic(err) // a literal of plain values
	}
	return &hcmv3.HttpFilter{Name: IstioMetadataExchangeFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{
		TypedConfig: build.Any(&xdstypev3.TypedStruct{TypeUrl: peerMetadataTypeURL, Value: cfg})}}
}

// statsConfig is Istio's stats filter configuration for one prometheus
// provider (Istio's generateStatsConfig).
func statsConfig(side policy.TrafficSide, t proxy.Type, m policy.Metrics) *statsv1.PluginConfig {
	cfg := &statsv1.PluginConfig{
		// Inbound and gateway traffic names its destination by the
		// proxy's own workload, never by the Host header.
		DisableHostHeaderFallback: side == policy.ServerSide || t == proxy.Router,
	}
	for _, o := range m.Overrides {
		mc := &statsv1.MetricConfig{Name: o.Metric, Drop: o.Disabled, Dimensions: map[string]string{}}
		for _, tag := range slices.Sorted(maps.Keys(o.Tags)) {
			if o.Tags[tag].GetOperation() == telemetry.MetricsOverrides_TagOverride_REMOVE {
				mc.TagsToRemove = append(mc.TagsToRemove, tag)
			} else {
				mc.Dimensions[tag] = o.Tags[tag].GetValue()
			}
		}
		cfg.Metrics = append(cfg.Metrics, mc)
	}
	return cfg
}

// accessLog builds one provider's access log for HTTP connection
// managers and for tcp_proxy; either is nil where the provider does not
// log (an HTTP ALS logs HTTP only, a TCP ALS TCP only).
func (b *listenerBuilder) accessLog(l policy.AccessLog) (http, tcp *accesslogv3.AccessLog) {
	var filter *accesslogv3.AccessLogFilter
	if l.Filter != "" {
		filter = &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ExtensionFilter{ExtensionFilter: &accesslogv3.ExtensionFilter{
			Name: CELAccessLogFilter, ConfigType: &accesslogv3.ExtensionFilter_TypedConfig{TypedConfig: build.Any(&celv3.ExpressionFilter{Expression: l.Filter})}}}}
	}
	mk := func(name string, cfg *accesslogv3.AccessLog_TypedConfig) *accesslogv3.AccessLog {
		return &accesslogv3.AccessLog{Name: name, Filter: filter, ConfigType: cfg}
	}
	mc := b.v.Snapshot().MeshConfig
	switch p := l.Provider.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog:
		f := &filev3.FileAccessLog{Path: p.EnvoyFileAccessLog.GetPath()}
		lf := p.EnvoyFileAccessLog.GetLogFormat()
		switch {
		case lf.GetText() != "":
			f.AccessLogFormat = textFormat(lf.GetText())
		case lf.GetLabels() != nil:
			f.AccessLogFormat = jsonFormat(lf.GetLabels(), p.EnvoyFileAccessLog.GetOmitEmptyValues())
		case mc.GetAccessLogEncoding() == meshv1alpha1.MeshConfig_JSON:
			// Istio: the built-in format follows MeshConfig's encoding and format.
			if mc.GetAccessLogFormat() != "" {
				var s structpb.Struct
				if err := s.UnmarshalJSON([]byte(mc.GetAccessLogFormat())); err == nil {
					f.AccessLogFormat = jsonFormat(&s, false)
					break
				}
			}
			f.AccessLogFormat = jsonFormat(defaultJSON(), false)
		case mc.GetAccessLogFormat() != "":
			f.AccessLogFormat = textFormat(mc.GetAccessLogFormat())
		default:
			f.AccessLogFormat = textFormat(IstioTextLogFormat)
		}
		a := mk(FileAccessLog, &accesslogv3.AccessLog_TypedConfig{TypedConfig: build.Any(f)})
		return a, a
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyOtelAls:
		svc, ok := b.providerCluster(l.Provider.GetName(), p.EnvoyOtelAls.GetService(), p.EnvoyOtelAls.GetPort())
		if !ok {
			return nil, nil
		}
		name := p.EnvoyOtelAls.GetLogName()
		if name == "" {
			name = "otel_envoy_accesslog"
		}
		o := &otelalsv3.OpenTelemetryAccessLogConfig{
			//lint:ignore SA1019 as Istio writes it: Envoy versions before grpc_service/log_name read only common_config
			CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{LogName: name, GrpcService: svc, TransportApiVersion: corev3.ApiVersion_V3},
			Body:         &otlpcommon.AnyValue{Value: &otlpcommon.AnyValue_StringValue{StringValue: IstioTextLogFormat}},
		}
		if t := p.EnvoyOtelAls.GetLogFormat().GetText(); t != "" {
			o.Body.Value = &otlpcommon.AnyValue_StringValue{StringValue: t}
		}
		if labels := p.EnvoyOtelAls.GetLogFormat().GetLabels(); labels != nil {
			o.Attributes = &otlpcommon.KeyValueList{}
			for _, k := range slices.Sorted(maps.Keys(labels.GetFields())) {
				o.Attributes.Values = append(o.Attributes.Values, &otlpcommon.KeyValue{Key: k,
					Value: &otlpcommon.AnyValue{Value: &otlpcommon.AnyValue_StringValue{StringValue: labels.GetFields()[k].GetStringValue()}}})
			}
		}
		a := mk(OtelAccessLog, &accesslogv3.AccessLog_TypedConfig{TypedConfig: build.Any(o)})
		return a, a
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyHttpAls:
		svc, ok := b.providerCluster(l.Provider.GetName(), p.EnvoyHttpAls.GetService(), p.EnvoyHttpAls.GetPort())
		if !ok {
			return nil, nil
		}
		name := p.EnvoyHttpAls.GetLogName()
		if name == "" {
			name = "http_envoy_accesslog"
		}
		h := &grpcalsv3.HttpGrpcAccessLogConfig{
			CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{LogName: name, GrpcService: svc, TransportApiVersion: corev3.ApiVersion_V3,
				FilterStateObjectsToLog: p.EnvoyHttpAls.GetFilterStateObjectsToLog()},
			AdditionalRequestHeadersToLog:   p.EnvoyHttpAls.GetAdditionalRequestHeadersToLog(),
			AdditionalResponseHeadersToLog:  p.EnvoyHttpAls.GetAdditionalResponseHeadersToLog(),
			AdditionalResponseTrailersToLog: p.EnvoyHttpAls.GetAdditionalResponseTrailersToLog(),
		}
		return mk(HTTPGrpcAccessLog, &accesslogv3.AccessLog_TypedConfig{TypedConfig: build.Any(h)}), nil
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyTcpAls:
		svc, ok := b.providerCluster(l.Provider.GetName(), p.EnvoyTcpAls.GetService(), p.EnvoyTcpAls.GetPort())
		if !ok {
			return nil, nil
		}
		name := p.EnvoyTcpAls.GetLogName()
		if name == "" {
			name = "tcp_envoy_accesslog"
		}
		t := &grpcalsv3.TcpGrpcAccessLogConfig{CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{LogName: name, GrpcService: svc,
			TransportApiVersion: corev3.ApiVersion_V3, FilterStateObjectsToLog: p.EnvoyTcpAls.GetFilterStateObjectsToLog()}}
		return nil, mk(TCPGrpcAccessLog, &accesslogv3.AccessLog_TypedConfig{TypedConfig: build.Any(t)})
	}
	return nil, nil
}

func textFormat(text string) *filev3.FileAccessLog_LogFormat {
	if !strings.HasSuffix(text, "\n") {
		text += "\n" // Istio ends every configured line
	}
	return &filev3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
		Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
			Specifier: &corev3.DataSource_InlineString{InlineString: text}}}}}
}

func jsonFormat(s *structpb.Struct, omitEmpty bool) *filev3.FileAccessLog_LogFormat {
	return &filev3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
		Format:          &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: s},
		OmitEmptyValues: omitEmpty}}
}

func defaultJSON() *structpb.Struct {
	s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(istioJSONLogFormat))}
	for k, v := range istioJSONLogFormat {
		s.Fields[k] = structpb.NewStringValue(v)
	}
	return s
}

// providerCluster is the gRPC service of a provider's collector: its
// outbound cluster, which must be one the proxy has (a mesh service
// visible to it, on that port). Istio names the service "[NAMESPACE/]HOST".
func (b *listenerBuilder) providerCluster(provider, service string, port uint32) (*corev3.GrpcService, bool) {
	cluster, host, ok := b.providerClusterName(provider, service, port)
	if !ok {
		return nil, false
	}
	return &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
		ClusterName: cluster, Authority: host}}}, true
}

func (b *listenerBuilder) providerClusterName(provider, service string, port uint32) (cluster, host string, ok bool) {
	host = service
	if _, h, cut := strings.Cut(service, "/"); cut {
		host = h
	}
	svc := b.v.Service(host)
	if svc == nil {
		b.problems.Addf("MeshConfig", "meshConfig.extensionProviders", "provider %q: service %s is not a mesh service visible to proxies of namespace %s; its telemetry is left out for them", provider, host, b.v.Key().Namespace)
		return "", "", false
	}
	if _, has := svc.Port(port); !has {
		b.problems.Addf("MeshConfig", "meshConfig.extensionProviders", "provider %q: service %s has no port %d; its telemetry is left out", provider, host, port)
		return "", "", false
	}
	return build.ClusterName(host, port, ""), host, true
}

// tracing is the HTTP connection managers' tracing for a provider
// (Istio's configureFromProviderConfig and configureSampling: the random
// sampling percentage decides, client and overall sampling stay 100%).
func (b *listenerBuilder) tracing(tr *policy.Tracing) *hcmv3.HttpConnectionManager_Tracing {
	name := tr.Provider.GetName()
	out := &hcmv3.HttpConnectionManager_Tracing{
		ClientSampling:  &typev3.Percent{Value: 100},
		OverallSampling: &typev3.Percent{Value: 100},
		RandomSampling:  &typev3.Percent{Value: tr.Sampling},
		CustomTags:      customTags(tr.CustomTags),
	}
	if b.v.Key().Type == proxy.Router {
		out.SpawnUpstreamSpan = wrapperspb.Bool(true) // Istio: gateways start a child span
	}
	switch p := tr.Provider.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Opentelemetry:
		o := p.Opentelemetry
		if o.GetSampling() != nil || o.GetResourceDetectors() != nil {
			b.problems.Addf("MeshConfig", "meshConfig.extensionProviders", "provider %q: sampling and resourceDetectors are not supported; the provider is used without them", name)
		}
		cluster, host, ok := b.providerClusterName(name, o.GetService(), o.GetPort())
		if !ok {
			return nil
		}
		cfg := &tracev3.OpenTelemetryConfig{ServiceName: b.traceServiceName()}
		if h := o.GetHttp(); h != nil {
			cfg.HttpService = &corev3.HttpService{HttpUri: &corev3.HttpUri{Uri: "http://" + host + "/" + strings.TrimPrefix(h.GetPath(), "/"),
				HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster}, Timeout: timeoutOr(h.GetTimeout())}, RequestHeadersToAdd: headers(h.GetHeaders())}
		} else {
			cfg.GrpcService = &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host}},
				Timeout: build.Duration(o.GetGrpc().GetTimeout())}
		}
		out.Provider = &tracev3.Tracing_Http{Name: OtelTracer, ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: build.Any(cfg)}}
		if n := o.GetMaxTagLength(); n != 0 {
			out.MaxPathTagLength = wrapperspb.UInt32(n)
		}
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Zipkin:
		z := p.Zipkin
		cluster, host, ok := b.providerClusterName(name, z.GetService(), z.GetPort())
		if !ok {
			return nil
		}
		path := z.GetPath()
		if path == "" {
			path = "/api/v2/spans"
		}
		cfg := &tracev3.ZipkinConfig{
			CollectorEndpointVersion: tracev3.ZipkinConfig_HTTP_JSON,
			TraceId_128Bit:           !z.GetEnable_64BitTraceId(),
			SharedSpanContext:        wrapperspb.Bool(false),
			CollectorService: &corev3.HttpService{HttpUri: &corev3.HttpUri{Uri: "http://" + host + path,
				HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster}, Timeout: timeoutOr(z.GetTimeout())}, RequestHeadersToAdd: headers(z.GetHeaders())},
		}
		out.Provider = &tracev3.Tracing_Http{Name: ZipkinTracer, ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: build.Any(cfg)}}
		if n := z.GetMaxTagLength(); n != 0 {
			out.MaxPathTagLength = wrapperspb.UInt32(n)
		}
	default:
		return nil
	}
	return out
}

// traceServiceName names the proxy's spans' service as Istio's default
// service cluster does: CANONICAL_SERVICE.NAMESPACE.
func (b *listenerBuilder) traceServiceName() string {
	return build.CanonicalService(b.v.Labels(), "istio-proxy") + "." + b.v.Key().Namespace
}

func timeoutOr(d *durationpb.Duration) *durationpb.Duration {
	if d == nil {
		return durationpb.New(5e9) // Istio's default: Envoy requires one
	}
	return build.Duration(d)
}

func headers(hs []*meshv1alpha1.MeshConfig_ExtensionProvider_HttpHeader) []*corev3.HeaderValueOption {
	var out []*corev3.HeaderValueOption
	for _, h := range hs {
		v := h.GetValue()
		if e := h.GetEnvName(); e != "" {
			v = "%ENVIRONMENT(" + e + ")%"
		}
		out = append(out, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: h.GetName(), Value: v},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})
	}
	return out
}

// customTags translates Telemetry customTags, sorted by tag name.
func customTags(tags map[string]*telemetry.Tracing_CustomTag) []*tracingv3.CustomTag {
	out := make([]*tracingv3.CustomTag, 0, len(tags))
	for _, name := range slices.Sorted(maps.Keys(tags)) {
		t := tags[name]
		ct := &tracingv3.CustomTag{Tag: name}
		switch v := t.GetType().(type) {
		case *telemetry.Tracing_CustomTag_Literal:
			ct.Type = &tracingv3.CustomTag_Literal_{Literal: &tracingv3.CustomTag_Literal{Value: v.Literal.GetValue()}}
		case *telemetry.Tracing_CustomTag_Environment:
			ct.Type = &tracingv3.CustomTag_Environment_{Environment: &tracingv3.CustomTag_Environment{Name: v.Environment.GetName(), DefaultValue: v.Environment.GetDefaultValue()}}
		case *telemetry.Tracing_CustomTag_Header:
			ct.Type = &tracingv3.CustomTag_RequestHeader{RequestHeader: &tracingv3.CustomTag_Header{Name: v.Header.GetName(), DefaultValue: v.Header.GetDefaultValue()}}
		case *telemetry.Tracing_CustomTag_Formatter:
			ct.Type = &tracingv3.CustomTag_Value{Value: v.Formatter.GetValue()}
		default:
			continue
		}
		out = append(out, ct)
	}
	return out
}
