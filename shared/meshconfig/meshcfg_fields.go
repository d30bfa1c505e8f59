package meshconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/spiffeid"
)

// Support is what nave does with a MeshConfig field.
type Support string

// Support values.
const (
	// Supported fields are applied (docs/meshconfig.md says how).
	Supported Support = "supported"
	// NotYet fields are refused: nave may apply them later.
	NotYet Support = "not yet supported"
	// Rejected fields are refused: they do not fit nave's model.
	Rejected Support = "rejected"
)

// MeshConfigField is one top-level MeshConfig field and what nave does
// with it. Reason says why a refused field is refused, or for a
// supported one what applies it.
type MeshConfigField struct {
	Name    string // its JSON (YAML) name
	Support Support
	Reason  string
}

// MeshConfigFields lists every field of istio.io/api mesh/v1alpha1
// MeshConfig, in the order of the API, with nave's support
// (TestMeshConfigFieldsComplete keeps it complete). It is read-only.
var MeshConfigFields = []MeshConfigField{
	{"proxyListenPort", Rejected, "sidecars' ports are fixed by nave's injector and bootstrap"},
	{"proxyInboundListenPort", Rejected, "sidecars' ports are fixed by nave's injector and bootstrap"},
	{"proxyHttpPort", Rejected, "sidecars' ports are fixed by nave's injector and bootstrap"},
	{"connectTimeout", Supported, "the connect timeout of every cluster a DestinationRule's connectionPool.tcp.connectTimeout does not set"},
	{"hboneIdleTimeout", Rejected, "nave has no ambient mode (HBONE)"},
	{"protocolDetectionTimeout", Supported, "how long sidecars wait for a client's first bytes on a port whose protocol they sniff (0, the default: no limit)"},
	{"tcpKeepalive", NotYet, "set it per host with a DestinationRule's connectionPool.tcp.tcpKeepalive"},
	{"ingressClass", NotYet, "Kubernetes Ingress is not translated"},
	{"ingressService", NotYet, "Kubernetes Ingress is not translated"},
	{"ingressControllerMode", NotYet, "Kubernetes Ingress is not translated"},
	{"ingressSelector", NotYet, "Kubernetes Ingress is not translated"},
	{"enableTracing", Supported, "it governs only Istio's legacy tracing through a tracer of the proxy's bootstrap (defaultConfig.tracing, refused), so either value traces nothing by itself, as for an Istio proxy whose bootstrap names no tracer; tracing comes from extensionProviders with the Telemetry API or defaultProviders.tracing (docs/telemetry.md)"},
	{"accessLogFile", Supported, "a file access log on every listener of proxies no Telemetry or defaultProviders.accessLogging configures logging for (Istio's fallback)"},
	{"accessLogFormat", Supported, "the format of accessLogFile and of envoyFileAccessLog providers without a logFormat (a JSON object with accessLogEncoding JSON)"},
	{"accessLogEncoding", Supported, "TEXT or JSON, for accessLogFile and envoyFileAccessLog providers without a logFormat"},
	{"enableEnvoyAccessLogService", NotYet, "the legacy access log service needs defaultConfig.envoyAccessLogService; use an envoyHttpAls or envoyTcpAls extension provider with the Telemetry API"},
	{"disableEnvoyListenerLog", Supported, "true leaves out the listener access log accessLogFile adds for connections no filter chain takes"},
	{"defaultConfig", Supported, "terminationDrainDuration, holdApplicationUntilProxyStarts and proxyMetadata, applied by the injector and nave-agent; its other fields are refused"},
	{"outboundTrafficPolicy", Supported, "mode ALLOW_ANY or REGISTRY_ONLY for sidecars whose Sidecar resource sets none"},
	{"inboundTrafficPolicy", NotYet, "inbound traffic always goes to the workload's own address as nave's inbound listeners set it"},
	{"configSources", Rejected, "a mesh's config comes from its spokes' clusters"},
	{"enableAutoMtls", Supported, "false turns auto mutual TLS off"},
	{"trustDomain", Supported, "the mesh's SPIFFE trust domain; it must be the trust domain the mesh was created with"},
	{"trustDomainAliases", Supported, "peers of these trust domains are accepted as the mesh's own"},
	{"caCertificates", Rejected, "a mesh's roots are its CA's, kept by the hub (navectl roots)"},
	{"defaultServiceExportTo", Supported, "the exportTo of services and ServiceEntries that set none"},
	{"defaultVirtualServiceExportTo", Supported, "the exportTo of VirtualServices that set none"},
	{"defaultDestinationRuleExportTo", Supported, "the exportTo of DestinationRules that set none"},
	{"rootNamespace", Supported, "the namespace of mesh-wide Sidecars, DestinationRules and security policies"},
	{"localityLbSetting", Supported, "the locality load balancing of traffic policies that set none"},
	{"zoneAwareLbSetting", NotYet, "zone-aware load balancing is not generated"},
	{"dnsRefreshRate", NotYet, "DNS clusters use Envoy's default refresh rate"},
	{"h2UpgradePolicy", NotYet, "set it per host with a DestinationRule's connectionPool.http.h2UpgradePolicy"},
	{"inboundClusterStatName", NotYet, "cluster stat names are nave's"},
	{"outboundClusterStatName", NotYet, "cluster stat names are nave's"},
	{"certificates", Rejected, "deprecated in Istio; certificates are the mesh CA's"},
	{"serviceSettings", Supported, "clusterLocal: the hosts' endpoints never leave their cluster"},
	{"serviceScopeConfigs", Rejected, "it scopes ambient multicluster services; nave has no ambient mode"},
	{"enablePrometheusMerge", NotYet, "metrics merging is nave-agent's, not configurable yet"},
	{"verifyCertificateAtClient", NotYet, "TLS origination verifies only with the DestinationRule's caCertificates"},
	{"ca", Rejected, "a mesh's CA is the hub's (ca.* config, navectl roots)"},
	{"extensionProviders", Supported, "the providers the Telemetry API and defaultProviders name (envoyFileAccessLog, envoyOtelAls, envoyHttpAls, envoyTcpAls, opentelemetry, zipkin, prometheus; docs/telemetry.md), and envoyExtAuthzHttp and envoyExtAuthzGrpc for AuthorizationPolicy CUSTOM (docs/extensions.md)"},
	{"defaultProviders", Supported, "the providers of tracing, metrics and accessLogging where no Telemetry names any (metrics: prometheus when unset, as Istio)"},
	{"discoverySelectors", NotYet, "a spoke watches every namespace; it will take selectors in its own config"},
	{"pathNormalization", NotYet, "paths are normalized as Envoy's default (BASE)"},
	{"defaultHttpRetryPolicy", NotYet, "set retries per route with a VirtualService"},
	{"meshMTLS", NotYet, "mesh mTLS uses Envoy's TLS defaults"},
	{"tlsDefaults", NotYet, "TLS origination uses Envoy's TLS defaults"},
	{"defaultTrafficPolicy", NotYet, "set traffic policies with DestinationRules"},
	{"serviceEntryVisibility", NotYet, "ServiceEntries are visible as their exportTo says"},
}

// ValidateMeshConfig checks what ParseMeshConfig cannot: values, and
// fields nave refuses (MeshConfigFields: not yet supported, or rejected),
// naming the field (meshConfig.…) and why. A nil MeshConfig is valid (it
// means Istio's defaults). Every set field is either checked or refused:
// none is ignored.
func ValidateMeshConfig(cfg *meshv1alpha1.MeshConfig) error {
	if cfg == nil {
		return nil
	}
	var errs []error
	m := cfg.ProtoReflect()
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		name := fd.JSONName()
		i := slices.IndexFunc(MeshConfigFields, func(f MeshConfigField) bool { return f.Name == name })
		switch {
		case i < 0:
			errs = append(errs, fmt.Errorf("meshConfig.%s: not known to nave (a newer MeshConfig field); refused", name))
		case MeshConfigFields[i].Support == NotYet:
			errs = append(errs, fmt.Errorf("meshConfig.%s: not yet supported (%s)", name, MeshConfigFields[i].Reason))
		case MeshConfigFields[i].Support == Rejected:
			errs = append(errs, fmt.Errorf("meshConfig.%s: rejected because %s", name, MeshConfigFields[i].Reason))
		}
		return true
	})
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	c := &checker{}
	p := path("meshConfig")
	if ns := cfg.GetRootNamespace(); ns != "" {
		if reason := dns1123Label(ns); reason != "" {
			c.fail(p.field("rootNamespace"), "namespace %s", reason)
		}
	}
	if td := cfg.GetTrustDomain(); td != "" {
		if err := spiffeid.ValidateTrustDomain(td); err != nil {
			c.fail(p.field("trustDomain"), "%q: %v", td, err)
		}
	}
	seen := map[string]int{}
	for i, td := range cfg.GetTrustDomainAliases() {
		fp := p.field("trustDomainAliases").index(i)
		if err := spiffeid.ValidateTrustDomain(td); err != nil {
			c.fail(fp, "%q: %v", td, err)
		} else if first, dup := seen[td]; dup {
			c.fail(fp, "%q is already listed at trustDomainAliases[%d]", td, first)
		}
		seen[td] = i
	}
	if otp := cfg.GetOutboundTrafficPolicy(); otp != nil {
		switch otp.GetMode() {
		case meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY, meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY:
		default:
			c.fail(p.field("outboundTrafficPolicy").field("mode"), "mode %s is not supported (ALLOW_ANY or REGISTRY_ONLY)", otp.GetMode())
		}
		if otp.GetTls() != nil {
			c.fail(p.field("outboundTrafficPolicy").field("tls"), "not yet supported (TLS origination to unknown destinations)")
		}
	}
	if d := cfg.GetConnectTimeout(); d != nil {
		checkDuration(c, p.field("connectTimeout"), d)
		if d.AsDuration() <= 0 {
			c.fail(p.field("connectTimeout"), "must be positive")
		}
	}
	if d := cfg.GetProtocolDetectionTimeout(); d != nil {
		if err := d.CheckValid(); err != nil {
			c.fail(p.field("protocolDetectionTimeout"), "invalid duration: %v", err)
		} else if t := d.AsDuration(); t != 0 && t < minDuration {
			c.fail(p.field("protocolDetectionTimeout"), "must be 0 (no limit) or at least 1ms, as in Istio")
		}
	}
	checkExportTo(c, p.field("defaultServiceExportTo"), cfg.GetDefaultServiceExportTo())
	checkExportTo(c, p.field("defaultVirtualServiceExportTo"), cfg.GetDefaultVirtualServiceExportTo())
	checkExportTo(c, p.field("defaultDestinationRuleExportTo"), cfg.GetDefaultDestinationRuleExportTo())
	validateMeshLocality(c, p.field("localityLbSetting"), cfg.GetLocalityLbSetting())
	for i, ss := range cfg.GetServiceSettings() {
		sp := p.field("serviceSettings").index(i)
		if len(ss.GetHosts()) == 0 {
			c.fail(sp.field("hosts"), "at least one host is required")
		}
		for j, h := range ss.GetHosts() {
			if reason := checkHost(h, hostRules{}); reason != "" {
				c.fail(sp.field("hosts").index(j), "%s", reason)
			}
		}
	}
	if cfg.GetAccessLogEncoding() == meshv1alpha1.MeshConfig_JSON && cfg.GetAccessLogFormat() != "" {
		var fields map[string]any
		if err := json.Unmarshal([]byte(cfg.GetAccessLogFormat()), &fields); err != nil {
			c.fail(p.field("accessLogFormat"), "with accessLogEncoding JSON the format must be a JSON object of field names to format strings: %v", err)
		}
	}
	validateExtensionProviders(c, p.field("extensionProviders"), cfg.GetExtensionProviders())
	validateDefaultConfig(c, p.field("defaultConfig"), cfg.GetDefaultConfig())
	if c.err != nil {
		return fmt.Errorf("%s: %s", c.err.field, c.err.reason)
	}
	return nil
}

// checkExportTo checks an exportTo list: "*", ".", "~" or namespace
// names, "~" alone.
func checkExportTo(c *checker, p path, list []string) {
	for i, e := range list {
		switch e {
		case "*", ".":
		case "~":
			if len(list) > 1 {
				c.fail(p.index(i), `"~" (nowhere) cannot be combined with other values`)
			}
		default:
			if reason := dns1123Label(e); reason != "" {
				c.fail(p.index(i), "namespace %s", reason)
			}
		}
	}
}

// validateMeshLocality checks the mesh-wide localityLbSetting as Istio
// does: distribute and failover exclude each other; weights of a
// distribute entry sum to 100.
func validateMeshLocality(c *checker, p path, s *networkingv1alpha3.LocalityLoadBalancerSetting) {
	if s == nil {
		return
	}
	if len(s.GetDistribute()) > 0 && (len(s.GetFailover()) > 0 || len(s.GetFailoverPriority()) > 0) {
		c.fail(p, "distribute and failover/failoverPriority cannot both be set")
	}
	for i, d := range s.GetDistribute() {
		dp := p.field("distribute").index(i)
		if d.GetFrom() == "" {
			c.fail(dp.field("from"), "from is required")
		}
		var sum uint32
		for _, k := range sortedMapKeys(d.GetTo()) {
			sum += d.GetTo()[k]
		}
		if sum != 100 {
			c.fail(dp.field("to"), "weights sum to %d, not 100", sum)
		}
	}
	for i, f := range s.GetFailover() {
		fp := p.field("failover").index(i)
		switch {
		case f.GetFrom() == "" || f.GetTo() == "":
			c.fail(fp, "from and to are required")
		case f.GetFrom() == f.GetTo():
			c.fail(fp, "from and to are the same region (%s)", f.GetFrom())
		}
	}
}

// validateExtensionProviders checks that every provider has a unique name
// and exactly one kind, and that a provider naming a service names a port.
func validateExtensionProviders(c *checker, p path, list []*meshv1alpha1.MeshConfig_ExtensionProvider) {
	seen := map[string]int{}
	for i, ep := range list {
		ep := ep
		pp := p.index(i)
		name := ep.GetName()
		switch first, dup := seen[name]; {
		case name == "":
			c.fail(pp.field("name"), "name is required")
		case dup:
			c.fail(pp.field("name"), "provider %q is already defined at extensionProviders[%d]", name, first)
		}
		seen[name] = i
		m := ep.ProtoReflect()
		oneof := m.Descriptor().Oneofs().ByName("provider")
		fd := m.WhichOneof(oneof)
		if fd == nil {
			c.fail(pp, "provider %q names no provider kind", name)
			continue
		}
		kind := pp.field(fd.JSONName())
		pm := m.Get(fd).Message()
		fields := pm.Descriptor().Fields()
		if svc := fields.ByName("service"); svc != nil && svc.Kind() == protoreflect.StringKind {
			if pm.Get(svc).String() == "" {
				c.fail(kind.field("service"), "service is required")
			} else if reason := checkHost(pm.Get(svc).String(), hostRules{}); reason != "" && !strings.Contains(pm.Get(svc).String(), "/") {
				c.fail(kind.field("service"), "%s", reason)
			}
			if port := fields.ByName("port"); port != nil && port.Kind() == protoreflect.Uint32Kind {
				checkPort(c, kind.field("port"), uint32(pm.Get(port).Uint()))
			}
		}
	}
}

// validateDefaultConfig refuses the ProxyConfig fields nave does not apply
// (ProxyConfigFields are applied) and checks those it does.
func validateDefaultConfig(c *checker, p path, pc *meshv1alpha1.ProxyConfig) {
	if pc == nil {
		return
	}
	if refused := UnappliedProxyConfigFields(pc); len(refused) > 0 {
		c.fail(p.field(refused[0]), "not yet supported (nave applies only %s of defaultConfig)", strings.Join(ProxyConfigFields, ", "))
	}
	if d := pc.GetTerminationDrainDuration(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			c.fail(p.field("terminationDrainDuration"), "invalid duration")
		}
	}
	for _, k := range sortedMapKeys(pc.GetProxyMetadata()) {
		if err := CheckProxyMetadataName(k); err != nil {
			c.fail(p.field("proxyMetadata"), "%q: %v", k, err)
		}
	}
}

// ValidateMeshConfigFor is ValidateMeshConfig for the MeshConfig of a mesh
// whose CA issues identities of trustDomain: a trustDomain the MeshConfig
// sets must be that one (a mesh's trust domain is fixed when it is
// created; trustDomainAliases is how peers of another one are accepted).
func ValidateMeshConfigFor(cfg *meshv1alpha1.MeshConfig, trustDomain string) error {
	if err := ValidateMeshConfig(cfg); err != nil {
		return err
	}
	if td := cfg.GetTrustDomain(); td != "" && td != trustDomain {
		return fmt.Errorf("meshConfig.trustDomain: %q is not the mesh's trust domain %q (list another trust domain in trustDomainAliases)", td, trustDomain)
	}
	return nil
}
