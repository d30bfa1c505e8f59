// Package mesh holds the merged, immutable view of one mesh that the xDS
// generators read: every cluster's services, endpoints and routing config,
// merged by hostname ("namespace sameness"), with cross-cluster conflicts
// resolved deterministically. The hub builds one per mesh (its push
// context); a spoke in fallback will build one from its local view.
//
// A Snapshot is never modified after Build returns, so it may be read from
// any number of goroutines.
package mesh

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"weak"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// Snapshot is the merged view of one mesh.
type Snapshot struct {
	Mesh string
	// Services by hostname.
	Services map[string]*Service
	// VirtualServices by host they name, in precedence order (see Build).
	VirtualServices map[string][]*Config
	// AllVirtualServices lists every VirtualService, sorted by namespace/name.
	AllVirtualServices []*Config
	// DestinationRules by host, sorted by namespace/name; which one applies
	// depends on who asks (DestinationRule).
	DestinationRules map[string][]*Config
	// Gateways and Sidecars, sorted by namespace/name.
	Gateways []*Config
	Sidecars []*Config
	// PeerAuthentications, RequestAuthentications and
	// AuthorizationPolicies (security.istio.io), each sorted by
	// namespace/name. Which ones apply depends on the workload (its
	// namespace and labels); see the generators.
	PeerAuthentications    []*Config
	RequestAuthentications []*Config
	AuthorizationPolicies  []*Config
	// Telemetries (telemetry.istio.io), sorted by namespace/name: which
	// ones apply depends on the workload, as for the security policies.
	Telemetries []*Config
	// EnvoyFilters, sorted by namespace/name: which ones patch a proxy's
	// config depends on its namespace and labels (xds/gen/patch).
	EnvoyFilters []*Config
	// TrustDomain is the mesh's SPIFFE trust domain: workload identities
	// are spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT, and
	// sidecars accept mTLS peers (inbound and upstream) only from it.
	// Build sets it from MeshConfig's trustDomain, else
	// Builder.TrustDomain, else DefaultTrustDomain. Peers of the
	// MeshConfig's trustDomainAliases are accepted as the mesh's own
	// (TrustDomainAliases).
	TrustDomain string
	// MeshConfig is the mesh's Istio MeshConfig (Builder.MeshConfig); nil
	// means Istio's defaults. Read it through the Snapshot's methods
	// (RootNamespace, AutoMTLS, OutboundAllowAny, ConnectTimeout,
	// LocalityLbSetting, the *ExportTo defaults, ClusterLocal), which
	// apply those defaults. Never modified.
	MeshConfig *meshv1alpha1.MeshConfig
	// MeshNetworks is the mesh's Istio MeshNetworks (Builder.MeshNetworks);
	// nil when none is configured.
	MeshNetworks *meshv1alpha1.MeshNetworks
	// NetworkGateways are the mesh's east-west gateways (network.go),
	// sorted by network, cluster, address, port and source: from
	// Services labelled topology.istio.io/network (at their external
	// addresses), WorkloadEntries labelled as gateways, and MeshNetworks.
	NetworkGateways []NetworkGateway
	// DomainSuffixes holds each cluster's DNS suffix (its service hostnames
	// are name.namespace.svc.<suffix>): a cluster's short host names in
	// config are completed with its own (ResolveHost).
	DomainSuffixes map[string]string
	// Conflicts lists objects that lost to a differently defined object of
	// the same kind, namespace and name in another cluster.
	Conflicts []Conflict
	// Problems lists config that could not be applied (e.g. a route to a
	// host the mesh does not know), naming the resource and field.
	Problems []Problem
	// Clusters lists the clusters merged into this snapshot.
	Clusters []ClusterState
	// GatewayAPIStatuses are the statuses of each cluster's Gateway API
	// objects (xds/gatewayapi), by cluster: what the cluster's spoke
	// writes back. Never modified.
	GatewayAPIStatuses map[string][]*meshconfigv1.GatewayAPIStatus

	// hostnames and sorted cache Hostnames and SortedServices, set at the
	// end of Build.
	hostnames []string
	sorted    []*Service
	// shared marks, during Build only, services shared with an earlier
	// snapshot: they are cloned before any change.
	shared map[*Service]bool
	// atAddress indexes services by endpoint address, built on first use.
	// An incrementally built snapshot instead answers from atOverlay (the
	// addresses of every service changed since atRoot, a fully indexed
	// snapshot) and then atRoot's index; atDepth counts the builds since
	// atRoot.
	atAddressOnce sync.Once
	atAddress     map[string][]*Service
	atRoot        *Snapshot
	atOverlay     map[string][]*Service
	atDepth       int
	// memo holds values derived from the snapshot (see Memo).
	memo sync.Map
	// networks indexes NetworkGateways and MeshNetworks (setNetworks).
	networks *networkIndex
}

// Memo returns the value derived from the snapshot under key, computing it
// with fn on first use. Since a snapshot never changes, derived values
// never go stale; keys should be unexported types of the caller's package.
// Safe for concurrent use (fn may run more than once under a race; one
// result wins).
func (s *Snapshot) Memo(key any, fn func() any) any {
	if v, ok := s.memo.Load(key); ok {
		return v
	}
	v, _ := s.memo.LoadOrStore(key, fn())
	return v
}

// MemoWeak is Memo for a value that is worth sharing while it is in use
// but not worth keeping for the snapshot's life: the snapshot holds it
// weakly, so once nothing else does (every generation that read it is
// done, its bytes marshalled) the collector frees it, and a later caller
// computes it again. fn must be a pure function of the snapshot and key:
// a recomputed value equals the one freed. Keys must not be used with
// Memo too. Safe for concurrent use (fn may run more than once; every
// caller gets an equal value).
func MemoWeak[T any](s *Snapshot, key any, fn func() *T) *T {
	w, ok := s.memo.Load(key)
	if ok {
		if v := w.(weak.Pointer[T]).Value(); v != nil {
			return v
		}
	}
	v := fn()
	if !ok {
		if w, ok = s.memo.LoadOrStore(key, weak.Make(v)); !ok {
			return v
		}
		if u := w.(weak.Pointer[T]).Value(); u != nil {
			return u // another caller's, stored first
		}
	}
	s.memo.Store(key, weak.Make(v))
	return v
}

// ServicesAt returns the services with an endpoint at address, sorted by
// hostname (what a proxy at that address serves). The index is built once
// per snapshot, on first use; safe for concurrent use.
func (s *Snapshot) ServicesAt(address string) []*Service {
	if s.atRoot != nil {
		if list, ok := s.atOverlay[address]; ok {
			return list
		}
		return s.atRoot.ServicesAt(address)
	}
	s.atAddressOnce.Do(func() {
		s.atAddress = map[string][]*Service{}
		for _, svc := range s.SortedServices() {
			for _, ep := range svc.Endpoints {
				list := s.atAddress[ep.Address]
				if !slices.Contains(list, svc) {
					s.atAddress[ep.Address] = append(list, svc)
				}
			}
		}
	})
	return s.atAddress[address]
}

// ClusterState is a cluster's contribution, as the snapshot saw it.
type ClusterState struct {
	Name         string `json:"name"`
	Stale        bool   `json:"stale"`
	Objects      int    `json:"objects"`
	Synced       bool   `json:"synced"`
	Connected    bool   `json:"connected"`
	DomainSuffix string `json:"domainSuffix"`
}

// Service is one destination hostname and the endpoints behind it.
type Service struct {
	Hostname  string      `json:"hostname"`
	Namespace string      `json:"namespace"`
	Ports     []Port      `json:"ports"`
	Endpoints []*Endpoint `json:"endpoints"`
	// External is true for MESH_EXTERNAL service entries.
	External bool `json:"external,omitempty"`
	// Addresses are the service's virtual IPs (cluster IP, ServiceEntry addresses).
	Addresses []string `json:"addresses,omitempty"`
	// ClusterAddresses are the addresses of the registry (Kubernetes)
	// Services of the host, by the cluster defining one (an empty list
	// for a headless Service): a proxy resolves the name to its own
	// cluster's (Istio's ClusterVIPs). Nil when no registry Service
	// defines the host.
	ClusterAddresses map[string][]string `json:"clusterAddresses,omitempty"`
	// AutoAddresses are the addresses the mesh allocated to a ServiceEntry
	// host that has none (an IPv4 and an IPv6 one; autoaddress.go). Only
	// proxies that capture DNS use them (proxy.Key.DNSCapture).
	AutoAddresses []string `json:"autoAddresses,omitempty"`
	// Resolution is how a proxy finds the endpoints: STATIC (EDS, the
	// default), NONE (original destination), DNS or DNS_ROUND_ROBIN.
	Resolution Resolution `json:"resolution,omitempty"`
	// ExportTo lists the namespaces that may see the service ("*" all, "."
	// its own); empty means all.
	ExportTo []string `json:"exportTo,omitempty"`
	// SubjectAltNames are the identities the service's servers may present
	// (ServiceEntry subjectAltNames, in the order first given); empty
	// means any identity the TLS settings otherwise allow.
	SubjectAltNames []string `json:"subjectAltNames,omitempty"`
	// Sources names the objects that define the service ("cluster:Kind ns/name").
	Sources []string `json:"sources"`

	// auto is what allocating AutoAddresses reads (Build only).
	auto autoAllocation
}

// Resolution values (ServiceEntry's names).
type Resolution string

// Resolution values.
const (
	ResolutionStatic     Resolution = ""
	ResolutionNone       Resolution = "NONE"
	ResolutionDNS        Resolution = "DNS"
	ResolutionDNSRoundRb Resolution = "DNS_ROUND_ROBIN"
)

// Port is a service port.
type Port struct {
	Name       string `json:"name"`
	Number     uint32 `json:"number"`
	Protocol   string `json:"protocol"`
	TargetPort uint32 `json:"targetPort,omitempty"`
}

// Port returns the service port with the given number.
func (s *Service) Port(number uint32) (Port, bool) {
	for _, p := range s.Ports {
		if p.Number == number {
			return p, true
		}
	}
	return Port{}, false
}

// Endpoint is one workload address behind a service.
type Endpoint struct {
	Address string `json:"address"`
	// Ports maps a service port name to the workload's port number; a port
	// missing here uses the service port's target port, else its number.
	// A port mapped to 0 is not served by the endpoint (Serves): a
	// WorkloadEntry behind a Kubernetes Service whose target port names a
	// port the entry does not have.
	Ports    map[string]uint32 `json:"ports,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Locality Locality          `json:"locality"`
	Network  string            `json:"network,omitempty"`
	Weight   uint32            `json:"weight,omitempty"`
	Health   Health            `json:"health"`
	// Cluster is the cluster the endpoint was discovered in.
	Cluster string `json:"cluster"`
	// Stale is true while its cluster is disconnected (within the grace
	// period). It is for people (debug pages): generators must not read it,
	// and DiffSnapshots ignores it, so that a cluster going away and coming
	// back regenerates nothing.
	Stale          bool   `json:"stale,omitempty"`
	ServiceAccount string `json:"serviceAccount,omitempty"`
	Source         string `json:"source"`
}

// Serves reports whether the endpoint serves service port p: the
// generators leave it out of p's load assignment and inbound ports
// otherwise.
func (e *Endpoint) Serves(p Port) bool {
	n, ok := e.Ports[p.Name]
	return !ok || n != 0
}

// PortFor resolves the workload port that serves service port p (one the
// endpoint Serves).
func (e *Endpoint) PortFor(p Port) uint32 {
	if n, ok := e.Ports[p.Name]; ok && n != 0 {
		return n
	}
	if p.TargetPort != 0 {
		return p.TargetPort
	}
	return p.Number
}

// Locality is region/zone/subzone.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	Subzone string `json:"subzone,omitempty"`
}

// Health of an endpoint.
type Health string

// Endpoint health values.
const (
	Healthy     Health = "healthy"
	Unhealthy   Health = "unhealthy"
	Terminating Health = "terminating"
)

// Config is one routing config object with the cluster it came from.
type Config struct {
	Cluster string
	Object  *meshconfig.Object
}

// VirtualService returns the spec of a VirtualService config; nil for a
// nil Config.
func (c *Config) VirtualService() *networking.VirtualService {
	if c == nil {
		return nil
	}
	vs, _ := c.Object.Spec.(*networking.VirtualService)
	return vs
}

// DestinationRule returns the spec of a DestinationRule config; nil for a
// nil Config (a host without a DestinationRule).
func (c *Config) DestinationRule() *networking.DestinationRule {
	if c == nil {
		return nil
	}
	dr, _ := c.Object.Spec.(*networking.DestinationRule)
	return dr
}

// PeerAuthentication returns the spec of a PeerAuthentication config;
// nil for a nil Config.
func (c *Config) PeerAuthentication() *securityv1beta1.PeerAuthentication {
	if c == nil {
		return nil
	}
	pa, _ := c.Object.Spec.(*securityv1beta1.PeerAuthentication)
	return pa
}

// RequestAuthentication returns the spec of a RequestAuthentication
// config; nil for a nil Config.
func (c *Config) RequestAuthentication() *securityv1beta1.RequestAuthentication {
	if c == nil {
		return nil
	}
	ra, _ := c.Object.Spec.(*securityv1beta1.RequestAuthentication)
	return ra
}

// AuthorizationPolicy returns the spec of an AuthorizationPolicy config;
// nil for a nil Config.
func (c *Config) AuthorizationPolicy() *securityv1beta1.AuthorizationPolicy {
	if c == nil {
		return nil
	}
	ap, _ := c.Object.Spec.(*securityv1beta1.AuthorizationPolicy)
	return ap
}

// Ref names the config for messages: "cluster:Kind namespace/name".
func (c *Config) Ref() string {
	return c.Cluster + ":" + c.Object.Ref().String()
}

// Conflict records an object that lost to another cluster's definition.
type Conflict struct {
	Kind          string `json:"kind"`
	Key           string `json:"key"`
	WinnerCluster string `json:"winnerCluster"`
	LoserCluster  string `json:"loserCluster"`
	Reason        string `json:"reason"`
}

// Problem is config the generators or the merge could not apply.
type Problem struct {
	Resource string `json:"resource"` // "cluster:Kind namespace/name"
	Field    string `json:"field"`
	Reason   string `json:"reason"`
}

// Hostnames returns the service hostnames in sorted order. The slice is
// shared: callers must not modify it.
func (s *Snapshot) Hostnames() []string {
	if s.hostnames != nil {
		return s.hostnames
	}
	out := make([]string, 0, len(s.Services))
	for h := range s.Services {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// DefaultTrustDomain is the trust domain of a mesh that names none
// (Istio's default).
const DefaultTrustDomain = "cluster.local"

// DestinationRule returns the DestinationRule of host that applies to a
// proxy in namespace from (Istio's lookup): one in the proxy's namespace,
// then one in the service's namespace, then one in the root namespace,
// then any other; each only if exported to the proxy's namespace (its
// exportTo, else the mesh's defaultDestinationRuleExportTo). from ""
// skips the first step. Nil when none applies.
func (s *Snapshot) DestinationRule(host, from string) *Config {
	list := s.DestinationRules[host]
	if len(list) == 0 {
		return nil
	}
	svcNS := ""
	if svc := s.Services[host]; svc != nil {
		svcNS = svc.Namespace
	}
	for _, ns := range []string{from, svcNS, s.RootNamespace()} {
		if ns == "" {
			continue
		}
		for _, c := range list {
			if c.Object.Namespace == ns && (from == "" || Exported(s.DestinationRuleExportTo(c), ns, from)) {
				return c
			}
		}
	}
	for _, c := range list {
		if from == "" || Exported(s.DestinationRuleExportTo(c), c.Object.Namespace, from) {
			return c
		}
	}
	return nil
}

// Exported reports whether config in namespace ns with the given exportTo
// is visible from namespace from. Empty exportTo and "*" mean everywhere,
// "." the config's own namespace, "~" nowhere.
func Exported(exportTo []string, ns, from string) bool {
	if len(exportTo) == 0 {
		return true
	}
	for _, e := range exportTo {
		switch e {
		case "*":
			return true
		case ".":
			if ns == from {
				return true
			}
		default:
			if e == from {
				return true
			}
		}
	}
	return false
}

// SortedServices returns the services in hostname order. The slice is
// shared: callers must not modify it.
func (s *Snapshot) SortedServices() []*Service {
	if s.sorted != nil {
		return s.sorted
	}
	out := make([]*Service, 0, len(s.Services))
	for _, h := range s.Hostnames() {
		out = append(out, s.Services[h])
	}
	return out
}

// Subset returns the labels of the named subset of host's DestinationRule
// (as seen from the service's own namespace).
func (s *Snapshot) Subset(host, subset string) (map[string]string, bool) {
	dr := s.DestinationRule(host, "")
	if dr == nil {
		return nil, false
	}
	for _, ss := range dr.DestinationRule().GetSubsets() {
		if ss.GetName() == subset {
			return ss.GetLabels(), true
		}
	}
	return nil, false
}

// Matches reports whether labels contain every selector pair.
func Matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// DomainSuffix is cluster's DNS suffix (meshconfig.DefaultDomainSuffix
// for a cluster the snapshot does not hold).
func (s *Snapshot) DomainSuffix(cluster string) string {
	if d := s.DomainSuffixes[cluster]; d != "" {
		return d
	}
	return meshconfig.DefaultDomainSuffix
}

// ResolveHost completes a short host name of config c ("reviews" in
// namespace "shop" is reviews.shop.svc.<suffix>) with the domain suffix of
// the cluster c came from, as Istio completes with its cluster's.
func (s *Snapshot) ResolveHost(host string, c *Config) string {
	return meshconfig.ResolveHost(host, c.Object.Namespace, s.DomainSuffix(c.Cluster))
}

// ServiceSuffix returns the domain suffix of a cluster of the mesh that
// svc's hostname is made of, name.namespace.svc.<suffix>, and false when
// it is not a name of that form.
func (s *Snapshot) ServiceSuffix(svc *Service) (string, bool) {
	if svc.Namespace == "" {
		return "", false
	}
	for _, d := range s.DomainSuffixes {
		if hasServiceSuffix(svc.Hostname, svc.Namespace, d) {
			return d, true
		}
	}
	if d := meshconfig.DefaultDomainSuffix; hasServiceSuffix(svc.Hostname, svc.Namespace, d) {
		return d, true
	}
	return "", false
}

// hasServiceSuffix reports whether host ends in "."+ns+".svc."+d (without
// building that string: generators ask for every service of a proxy).
func hasServiceSuffix(host, ns, d string) bool {
	rest, ok := strings.CutSuffix(host, d)
	if ok {
		rest, ok = strings.CutSuffix(rest, ".svc.")
	}
	if ok {
		rest, ok = strings.CutSuffix(rest, ns)
	}
	return ok && strings.HasSuffix(rest, ".")
}
