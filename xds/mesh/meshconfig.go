package mesh

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// DefaultRootNamespace is the root namespace of a mesh whose MeshConfig
// names none (Istio's default): a Sidecar there without a selector is
// every namespace's default, a DestinationRule there is the last
// fallback, a PeerAuthentication there without a selector is the
// mesh-wide policy and an AuthorizationPolicy there applies to every
// namespace.
const DefaultRootNamespace = "istio-system"

// DefaultConnectTimeout is Istio's mesh default connectTimeout, a
// cluster's when neither MeshConfig nor a DestinationRule sets one.
const DefaultConnectTimeout = 10 * time.Second

// RootNamespace is the mesh's root namespace: MeshConfig rootNamespace,
// DefaultRootNamespace when unset.
func (s *Snapshot) RootNamespace() string {
	if ns := s.MeshConfig.GetRootNamespace(); ns != "" {
		return ns
	}
	return DefaultRootNamespace
}

// TrustDomainAliases are the trust domains whose peers are accepted as the
// mesh's own (MeshConfig trustDomainAliases), without the mesh's trust
// domain itself, in the order given.
func (s *Snapshot) TrustDomainAliases() []string {
	var out []string
	for _, td := range s.MeshConfig.GetTrustDomainAliases() {
		if td != "" && td != s.TrustDomain && !slices.Contains(out, td) {
			out = append(out, td)
		}
	}
	return out
}

// AutoMTLS reports whether auto mutual TLS applies (MeshConfig
// enableAutoMtls; on unless set false).
func (s *Snapshot) AutoMTLS() bool {
	e := s.MeshConfig.GetEnableAutoMtls()
	return e == nil || e.GetValue()
}

// OutboundAllowAny reports whether the mesh-wide outbound traffic policy
// lets traffic to unknown destinations through (ALLOW_ANY, Istio's
// default when MeshConfig sets none). A Sidecar's own policy overrides it.
func (s *Snapshot) OutboundAllowAny() bool {
	p := s.MeshConfig.GetOutboundTrafficPolicy()
	return p == nil || p.GetMode() != meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY
}

// ConnectTimeout is the mesh-wide cluster connect timeout (MeshConfig
// connectTimeout, DefaultConnectTimeout when unset). A DestinationRule's
// connectionPool.tcp.connectTimeout overrides it.
func (s *Snapshot) ConnectTimeout() time.Duration {
	if d := s.MeshConfig.GetConnectTimeout(); d != nil && d.AsDuration() > 0 {
		return d.AsDuration()
	}
	return DefaultConnectTimeout
}

// LocalityLbSetting is the mesh-wide locality load balancing setting
// (MeshConfig localityLbSetting), nil when unset. A traffic policy's own
// loadBalancer.localityLbSetting overrides it as a whole.
func (s *Snapshot) LocalityLbSetting() *networking.LocalityLoadBalancerSetting {
	return s.MeshConfig.GetLocalityLbSetting()
}

// Export defaults by kind: what exportTo an object or service that sets
// none takes (MeshConfig default{Service,VirtualService,DestinationRule}ExportTo).
const (
	exportService = iota
	exportVirtualService
	exportDestinationRule
)

func (s *Snapshot) exportTo(kind int, exportTo []string) []string {
	if len(exportTo) > 0 {
		return exportTo
	}
	switch kind {
	case exportService:
		return s.MeshConfig.GetDefaultServiceExportTo()
	case exportVirtualService:
		return s.MeshConfig.GetDefaultVirtualServiceExportTo()
	default:
		return s.MeshConfig.GetDefaultDestinationRuleExportTo()
	}
}

// ServiceExportTo is the exportTo that applies to svc: its own, else the
// mesh default (empty: everywhere).
func (s *Snapshot) ServiceExportTo(svc *Service) []string {
	return s.exportTo(exportService, svc.ExportTo)
}

// VirtualServiceExportTo is the exportTo that applies to VirtualService
// c: its own, else the mesh default (empty: everywhere).
func (s *Snapshot) VirtualServiceExportTo(c *Config) []string {
	return s.exportTo(exportVirtualService, c.VirtualService().GetExportTo())
}

// DestinationRuleExportTo is the exportTo that applies to DestinationRule
// c: its own, else the mesh default (empty: everywhere).
func (s *Snapshot) DestinationRuleExportTo(c *Config) []string {
	return s.exportTo(exportDestinationRule, c.DestinationRule().GetExportTo())
}

// ClusterLocal reports whether host's endpoints stay in their cluster
// (MeshConfig serviceSettings clusterLocal): a proxy then gets only the
// endpoints of its own cluster. The last matching settings entry wins, as
// in Istio; host patterns are exact, "*" or "*.suffix".
func (s *Snapshot) ClusterLocal(host string) bool {
	local := false
	for _, ss := range s.MeshConfig.GetServiceSettings() {
		for _, h := range ss.GetHosts() {
			if HostMatches(h, host) {
				local = ss.GetSettings().GetClusterLocal()
			}
		}
	}
	return local
}

// HasClusterLocal reports whether any serviceSettings entry makes hosts
// cluster-local: only then does a proxy's cluster matter to its config.
func (s *Snapshot) HasClusterLocal() bool {
	for _, ss := range s.MeshConfig.GetServiceSettings() {
		if ss.GetSettings().GetClusterLocal() && len(ss.GetHosts()) > 0 {
			return true
		}
	}
	return false
}

// HostMatches reports whether host matches pattern: "*" matches all,
// "*.example.com" any host ending in ".example.com", anything else only
// itself.
func HostMatches(pattern, host string) bool {
	switch {
	case pattern == "*":
		return true
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(host, pattern[1:])
	default:
		return pattern == host
	}
}

// sameMeshMessage reports whether two mesh-wide messages (MeshConfig,
// MeshNetworks) mean the same: equal, or both empty or nil (Istio's
// defaults, none configured).
func sameMeshMessage(a, b proto.Message) bool {
	return proto.Equal(a, b) || proto.Size(a) == 0 && proto.Size(b) == 0
}

// meshTrustDomain is the trust domain a snapshot takes: MeshConfig's
// trustDomain when set, else the builder's, else DefaultTrustDomain.
func meshTrustDomain(cfg *meshv1alpha1.MeshConfig, builder string) string {
	if td := cfg.GetTrustDomain(); td != "" {
		return td
	}
	if builder != "" {
		return builder
	}
	return DefaultTrustDomain
}

// ProtocolDetectionTimeout is how long a sidecar waits for a client's
// first bytes on a port whose protocol it sniffs before it proxies the
// connection as TCP (MeshConfig protocolDetectionTimeout). Zero, Istio's
// default, waits as long as the client takes: server-first protocols on
// undeclared ports then hang, and their ports must be declared TCP.
func (s *Snapshot) ProtocolDetectionTimeout() time.Duration {
	return s.MeshConfig.GetProtocolDetectionTimeout().AsDuration()
}

// ExtensionProvider is the MeshConfig extensionProviders entry named
// name (compared without case, as Istio does), nil when there is none.
func (s *Snapshot) ExtensionProvider(name string) *meshv1alpha1.MeshConfig_ExtensionProvider {
	for _, p := range s.MeshConfig.GetExtensionProviders() {
		if strings.EqualFold(p.GetName(), name) {
			return p
		}
	}
	return nil
}
