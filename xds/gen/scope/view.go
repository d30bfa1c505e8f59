// Package scope holds the View: one proxy's scoped read model of a
// snapshot — what the proxy may see (exportTo, its Sidecar resource's
// egress hosts), which config applies to it (VirtualServices, Gateways
// selecting it, DestinationRules, its Sidecar resource, its workload's
// security policies) and the ports its own workload serves — and the
// signatures that say what a proxy's labels and IPs contribute to its
// config, so that caches may key on them (invariant 6: generation reads
// only what its key holds). It generates nothing.
package scope

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gatewayapi"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// View is one Envoy proxy's scoped view of a snapshot: what it may see
// (exportTo, its Sidecar resource's egress hosts), which config applies to
// it (DestinationRule lookup, Gateways selecting it, its workload's
// security policies), and the ports its workload serves. Every Envoy
// generator reads the snapshot only through a View, and a View is a
// function of (snapshot, key) alone (invariant 6). It also holds the
// Problems met scoping and generating for the proxy.
//
// A View belongs to one goroutine: it selects lazily and caches.
type View struct {
	snap   *mesh.Snapshot
	key    proxy.Key
	labels map[string]string
	ips    []string

	sidecar     *mesh.Config
	egressHosts []egressHost // from the Sidecar resource; nil = everything
	services    []*mesh.Service
	byHost      map[string]*mesh.Service
	wildcardVS  []string // VirtualService hosts with a wildcard, sorted
	gateways    []*mesh.Config
	// gatewayVS indexes VirtualServices by the gateways they bind, built
	// on first use.
	gatewayVS map[gatewayRef][]*mesh.Config
	// memo holds what generators derive from the view (Memo).
	memo map[any]any

	inbound     []InboundPort
	inboundDone bool

	// The workload's own security policies, each selected on first use.
	peerAuthn                        policy.PeerAuthentications
	authzPolicies, requestAuthn      []*mesh.Config
	peerDone, authzDone, requestDone bool
	telemetryDone                    bool
	telemetry                        *policy.Telemetry

	problems build.Problems
}

type egressHost struct {
	namespace string // "*", or a namespace name ("." resolved)
	host      string // "*", "*.suffix" or exact
}

// New scopes snapshot s to the proxy with key k.
func New(s *mesh.Snapshot, k proxy.Key) *View {
	v := &View{snap: s, key: k, labels: k.LabelMap(), ips: k.IPList()}
	if k.Type == proxy.Sidecar {
		v.sidecar = v.selectSidecar()
		// A Sidecar without egress listeners restricts nothing (Istio reads
		// it as */*).
		if sc := v.SidecarSpec(); len(sc.GetEgress()) > 0 {
			v.egressHosts = []egressHost{}
			for _, eg := range sc.GetEgress() {
				for _, h := range eg.GetHosts() {
					ns, host, ok := strings.Cut(h, "/")
					if !ok {
						continue // validation refuses this; be safe
					}
					if ns == "." {
						ns = v.sidecar.Object.Namespace
					}
					v.egressHosts = append(v.egressHosts, egressHost{namespace: ns, host: host})
				}
			}
		}
	}
	// Most proxies see every service: then the snapshot's own sorted list
	// and map serve, unchanged (they are never modified).
	all := s.SortedServices()
	v.services, v.byHost = all, s.Services
	for i, svc := range all {
		if v.visible(svc.Namespace, s.ServiceExportTo(svc), svc.Hostname) {
			continue
		}
		v.services = append(make([]*mesh.Service, 0, len(all)), all[:i]...)
		v.byHost = make(map[string]*mesh.Service, len(all))
		for _, p := range v.services {
			v.byHost[p.Hostname] = p
		}
		for _, svc := range all[i+1:] {
			if v.visible(svc.Namespace, s.ServiceExportTo(svc), svc.Hostname) {
				v.services = append(v.services, svc)
				v.byHost[svc.Hostname] = svc
			}
		}
		break
	}
	for h := range s.VirtualServices {
		if strings.HasPrefix(h, "*") {
			v.wildcardVS = append(v.wildcardVS, h)
		}
	}
	slices.Sort(v.wildcardVS)
	if k.Type == proxy.Router {
		for _, gw := range s.Gateways {
			spec, _ := gw.Object.Spec.(*networking.Gateway)
			// A Gateway translated from the Gateway API selects the pods
			// of its own namespace only.
			if mesh.Matches(spec.GetSelector(), v.labels) &&
				(gw.Object.Annotations[gatewayapi.SourceAnnotation] == "" || gw.Object.Namespace == v.key.Namespace) {
				v.gateways = append(v.gateways, gw)
			}
		}
	}
	return v
}

// Snapshot returns the snapshot the view scopes.
func (v *View) Snapshot() *mesh.Snapshot { return v.snap }

// Key returns the proxy key.
func (v *View) Key() proxy.Key { return v.key }

// Labels returns the proxy's labels.
func (v *View) Labels() map[string]string { return v.labels }

// Services returns the services visible to the proxy, sorted by hostname.
func (v *View) Services() []*mesh.Service { return v.services }

// Addresses returns the addresses the proxy reaches svc at (listeners bind
// to them, route domains name them): its own (cluster IPs, ServiceEntry
// addresses), else, for a proxy that captures DNS, the mesh's
// auto-allocated ones of the proxy's IP families, as Istio's
// GetAllAddressesForProxy gives them. Shared: callers must not modify it.
func (v *View) Addresses(svc *mesh.Service) []string {
	if len(svc.Addresses) > 0 || !v.key.DNSCapture {
		return svc.Addresses
	}
	return svc.AutoAddressesFor(v.key.IPFamilies())
}

// Service returns a visible service by hostname, or nil.
func (v *View) Service(host string) *mesh.Service { return v.byHost[host] }

// visible applies exportTo and the Sidecar egress hosts to config or a
// service in namespace ns for host.
func (v *View) visible(ns string, exportTo []string, host string) bool {
	if !mesh.Exported(exportTo, ns, v.key.Namespace) {
		return false
	}
	if v.egressHosts == nil {
		return true
	}
	for _, e := range v.egressHosts {
		if (e.namespace == "*" || e.namespace == ns) && HostMatches(e.host, host) {
			return true
		}
	}
	return false
}

// HostMatches reports whether host matches pattern (mesh.HostMatches):
// "*" matches all, "*.example.com" any host ending in ".example.com",
// anything else only itself.
func HostMatches(pattern, host string) bool { return mesh.HostMatches(pattern, host) }

// VirtualServices returns the VirtualServices that apply to host for
// sidecar traffic (bound to "mesh", explicitly or by naming no gateways),
// visible to the proxy, in precedence order: exact host first, then
// wildcard hosts from the most specific; within one host, oldest first.
// Istio uses only the first for a sidecar; generators report the rest.
func (v *View) VirtualServices(host string) []*mesh.Config {
	var out []*mesh.Config
	add := func(list []*mesh.Config) {
		for _, c := range list {
			vs := c.VirtualService()
			if boundToMesh(vs.GetGateways()) && v.visible(c.Object.Namespace, v.snap.VirtualServiceExportTo(c), host) && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	add(v.snap.VirtualServices[host])
	// Longer wildcard = more specific.
	wild := slices.Clone(v.wildcardVS)
	slices.SortStableFunc(wild, func(a, b string) int { return len(b) - len(a) })
	for _, w := range wild {
		if HostMatches(w, host) {
			add(v.snap.VirtualServices[w])
		}
	}
	return out
}

func boundToMesh(gateways []string) bool {
	return len(gateways) == 0 || slices.Contains(gateways, "mesh")
}

// Gateways returns the Gateway resources that select this proxy (routers
// only), sorted by namespace/name. An empty selector selects every gateway
// proxy.
func (v *View) Gateways() []*mesh.Config { return v.gateways }

// GatewayVirtualServices returns the VirtualServices bound to gateway gw
// ("namespace/name" or a bare name in the VirtualService's namespace in
// spec.gateways), visible to the proxy, sorted by namespace/name.
func (v *View) GatewayVirtualServices(gw *mesh.Config) []*mesh.Config {
	if v.gatewayVS == nil {
		v.gatewayVS = map[gatewayRef][]*mesh.Config{}
		var seen []gatewayRef
		for _, c := range v.snap.AllVirtualServices {
			vs := c.VirtualService()
			if !mesh.Exported(v.snap.VirtualServiceExportTo(c), c.Object.Namespace, v.key.Namespace) {
				continue
			}
			seen = seen[:0]
			for _, g := range vs.GetGateways() {
				if g == "mesh" {
					continue
				}
				ref := gatewayRef{namespace: c.Object.Namespace, name: g}
				if ns, name, ok := strings.Cut(g, "/"); ok {
					ref = gatewayRef{namespace: ns, name: name}
				}
				if !slices.Contains(seen, ref) {
					seen = append(seen, ref)
					v.gatewayVS[ref] = append(v.gatewayVS[ref], c)
				}
			}
		}
	}
	return v.gatewayVS[gatewayRef{namespace: gw.Object.Namespace, name: gw.Object.Name}]
}

// gatewayRef is a Gateway as a VirtualService's gateways field names it
// ("namespace/name", or a name in the VirtualService's namespace).
type gatewayRef struct{ namespace, name string }

// Memo returns the value a generator derives from the view under key,
// computing it with fn on first use: what the generators of several types
// need (a router's gateway plan serves LDS and RDS) is derived once per
// View. Keys should be unexported types of the caller's package; the
// value is read-only once returned.
func (v *View) Memo(key any, fn func() any) any {
	if val, ok := v.memo[key]; ok {
		return val
	}
	if v.memo == nil {
		v.memo = map[any]any{}
	}
	val := fn()
	v.memo[key] = val
	return val
}

// DestinationRule returns the DestinationRule that applies to host for
// this proxy, or nil.
func (v *View) DestinationRule(host string) *mesh.Config {
	return v.snap.DestinationRule(host, v.key.Namespace)
}

// Subset returns the labels of a subset of host's applicable
// DestinationRule.
func (v *View) Subset(host, subset string) (map[string]string, bool) {
	for _, ss := range v.DestinationRule(host).DestinationRule().GetSubsets() {
		if ss.GetName() == subset {
			return ss.GetLabels(), true
		}
	}
	return nil, false
}

// selectSidecar picks the proxy's Sidecar resource: one in its namespace
// whose workloadSelector matches its labels, else the namespace's one
// without a selector, else the root namespace's one without a selector.
func (v *View) selectSidecar() *mesh.Config {
	var nsDefault, rootDefault *mesh.Config
	for _, c := range v.snap.Sidecars {
		sc, _ := c.Object.Spec.(*networking.Sidecar)
		sel := sc.GetWorkloadSelector().GetLabels()
		switch {
		case c.Object.Namespace == v.key.Namespace && len(sel) > 0:
			if mesh.Matches(sel, v.labels) {
				return c
			}
		case c.Object.Namespace == v.key.Namespace && nsDefault == nil:
			nsDefault = c
		case c.Object.Namespace == v.snap.RootNamespace() && len(sel) == 0 && rootDefault == nil:
			rootDefault = c
		}
	}
	if nsDefault != nil {
		return nsDefault
	}
	return rootDefault
}

// SidecarConfig returns the Sidecar resource that applies, or nil.
func (v *View) SidecarConfig() *mesh.Config { return v.sidecar }

// SidecarSpec returns the spec of the Sidecar resource that applies, or nil.
func (v *View) SidecarSpec() *networking.Sidecar {
	if v.sidecar == nil {
		return nil
	}
	sc, _ := v.sidecar.Object.Spec.(*networking.Sidecar)
	return sc
}

// AllowAny reports whether traffic to unknown destinations passes through
// (outboundTrafficPolicy ALLOW_ANY, Istio's default) rather than being
// dropped (REGISTRY_ONLY): the Sidecar resource's policy, else the
// MeshConfig's (mesh.Snapshot.OutboundAllowAny).
func (v *View) AllowAny() bool {
	// REGISTRY_ONLY is the enum's zero value: an explicit policy with no
	// mode restricts.
	p := v.SidecarSpec().GetOutboundTrafficPolicy()
	if p == nil {
		return v.snap.OutboundAllowAny()
	}
	return p.GetMode() == networking.OutboundTrafficPolicy_ALLOW_ANY
}

// Problems returns where the problems met scoping and generating for the
// proxy are recorded.
func (v *View) Problems() *build.Problems { return &v.problems }
