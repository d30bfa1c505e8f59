// Package load drives a real nave-hub process at scale and measures it: a
// workload of services and endpoints spread over several clusters, fed to
// the hub by the real spoke uplink code running in-process (one uplink per
// cluster), N real gRPC ADS streams (state of the world or delta) that
// behave like Envoy sidecars, gateways and proxyless gRPC clients, the
// hub's CPU and memory from /proc, and the scenarios of issue 6 (cold
// connect, fan-out, endpoint churn, spoke flap) with a printed table.
//
// The command e2e/load/cmd/nave-load prints the table; e2e's BenchmarkLoad
// runs the same scenarios as a Go benchmark.
package load

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen/build"
)

// ServicePort is the one port of every service, and EndpointPort the
// port its endpoints listen on.
const (
	ServicePort  = 80
	EndpointPort = 8080
)

// Address ranges (second octet of 10.x.y.z) of what the workload names, so
// they never collide: endpoints, addresses given by endpoint moves, proxies.
const (
	endpointBase = 0
	movedBase    = 64
	proxyBase    = 128
	rangeSize    = 64 << 16
)

// created is every object's creation time: equal times make conflict
// resolution depend on the cluster name only, and no run differs from
// another.
var created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Workload is the config the fake spokes push: Services services over
// Namespaces namespaces, each a ServiceEntry (MESH_INTERNAL, STATIC, one
// HTTP port, a workload selector by app label) defined identically in every
// cluster, with EndpointsPerCluster WorkloadEntries in each cluster (the
// cluster's locality, no network). The first cluster also holds the config
// a user adds: a DestinationRule for service 0 or EditService (what the
// fan-out scenario edits) and an ingress Gateway with a VirtualService routing to the
// first ten services. Not safe for concurrent use.
type Workload struct {
	Services, EndpointsPerCluster, Namespaces int
	Clusters                                  []string

	objects [][]*meshconfig.Object // per cluster
	// entries[c][s*EndpointsPerCluster+e] is the index in objects[c] of
	// service s's endpoint e.
	entries  [][]int
	moves    int // endpoint moves so far (addresses given out)
	drIndex  int // the DestinationRule's index in objects[0]
	drEdits  int
	edited   int // the service whose DestinationRule EditFanOut edits
	kinds    map[string]*meshconfig.Kind
	hostname []string
}

// WorkloadOptions size a Workload.
type WorkloadOptions struct {
	Services, EndpointsPerCluster int
	Clusters                      []string // default c1, c2, c3
	Namespaces                    int      // default 10
	// EditService is the service whose DestinationRule the fan-out
	// scenario edits (default 0).
	EditService int
	// Scoped adds to the first cluster a Sidecar per namespace (issue 26's
	// S5) whose egress is its own namespace and the two shared ones, ns-0
	// and ns-1: a proxy then sees only those namespaces' services.
	Scoped bool
}

// NewWorkload builds the objects of every cluster, each checked with
// meshconfig.Validate as a spoke would.
func NewWorkload(o WorkloadOptions) (*Workload, error) {
	if len(o.Clusters) == 0 {
		o.Clusters = []string{"c1", "c2", "c3"}
	}
	if o.Namespaces <= 0 {
		o.Namespaces = 10
	}
	if o.Services <= 0 || o.EndpointsPerCluster <= 0 {
		return nil, fmt.Errorf("services (%d) and endpoints per cluster (%d) must be positive", o.Services, o.EndpointsPerCluster)
	}
	if o.EditService < 0 || o.EditService >= o.Services {
		return nil, fmt.Errorf("the edited service %d is not one of the %d services", o.EditService, o.Services)
	}
	if o.Services*len(o.Clusters)*o.EndpointsPerCluster >= rangeSize {
		return nil, fmt.Errorf("%d endpoints do not fit the address plan (at most %d)", o.Services*len(o.Clusters)*o.EndpointsPerCluster, rangeSize-1)
	}
	w := &Workload{Services: o.Services, EndpointsPerCluster: o.EndpointsPerCluster, Namespaces: o.Namespaces, Clusters: o.Clusters,
		kinds: map[string]*meshconfig.Kind{}, edited: o.EditService}
	for _, k := range []string{"ServiceEntry", "WorkloadEntry", "DestinationRule", "Gateway", "VirtualService", "Sidecar"} {
		kind, err := meshconfig.KindFor(meshconfig.GroupNetworking+"/v1", k)
		if err != nil {
			return nil, err
		}
		w.kinds[k] = kind
	}
	for s := range o.Services {
		w.hostname = append(w.hostname, fmt.Sprintf("svc-%d.%s.svc.cluster.local", s, w.Namespace(s)))
	}
	for c := range o.Clusters {
		var objs []*meshconfig.Object
		idx := make([]int, 0, o.Services*o.EndpointsPerCluster)
		for s := range o.Services {
			objs = append(objs, w.serviceEntry(s))
			for e := range o.EndpointsPerCluster {
				idx = append(idx, len(objs))
				objs = append(objs, w.workloadEntry(s, c, e, addr(endpointBase, 1+(s*len(o.Clusters)+c)*o.EndpointsPerCluster+e)))
			}
		}
		if c == 0 {
			w.drIndex = len(objs)
			objs = append(objs, w.destinationRule(networking.LoadBalancerSettings_ROUND_ROBIN))
			objs = append(objs, w.ingress()...)
			if o.Scoped {
				for n := range o.Namespaces {
					objs = append(objs, w.object("Sidecar", fmt.Sprintf("ns-%d", n), "default", nil, &networking.Sidecar{
						Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*", "ns-0/*", "ns-1/*"}}}}))
				}
			}
		}
		for _, obj := range objs {
			if err := meshconfig.Validate(obj); err != nil {
				return nil, fmt.Errorf("generated %s %s does not validate: %w", obj.Kind, obj.Key(), err)
			}
		}
		w.objects = append(w.objects, objs)
		w.entries = append(w.entries, idx)
	}
	return w, nil
}

// addr is 10.(base+k/65536).(k/256%256).(k%256).
func addr(base, k int) string {
	return fmt.Sprintf("10.%d.%d.%d", base+k>>16, k>>8&255, k&255)
}

// Namespace is service s's namespace.
func (w *Workload) Namespace(s int) string { return fmt.Sprintf("ns-%d", s%w.Namespaces) }

// Hostname is service s's host name.
func (w *Workload) Hostname(s int) string { return w.hostname[s] }

// ClusterName is the xDS (outbound, EDS) cluster of service s.
func (w *Workload) ClusterName(s int) string {
	return build.ClusterName(w.hostname[s], ServicePort, "")
}

// Locality is cluster c's "region/zone".
func (w *Workload) Locality(c int) (region, zone string) {
	return fmt.Sprintf("region-%d", c/2+1), fmt.Sprintf("zone-%d", c+1)
}

// Objects returns cluster c's complete desired state. The slice is the
// caller's; the objects are shared and never modified.
func (w *Workload) Objects(c int) []*meshconfig.Object {
	return append([]*meshconfig.Object(nil), w.objects[c]...)
}

// Count is the number of objects of cluster c.
func (w *Workload) Count(c int) int { return len(w.objects[c]) }

func (w *Workload) object(kind, ns, name string, labels map[string]string, spec proto.Message) *meshconfig.Object {
	o := &meshconfig.Object{Kind: w.kinds[kind], Name: name, Namespace: ns, Labels: labels, CreationTime: created, Spec: spec, Origin: "nave-load"}
	o.Version = o.ComputeVersion()
	return o
}

func (w *Workload) serviceEntry(s int) *meshconfig.Object {
	return w.object("ServiceEntry", w.Namespace(s), fmt.Sprintf("svc-%d", s), nil, &networking.ServiceEntry{
		Hosts:            []string{w.hostname[s]},
		Ports:            []*networking.ServicePort{{Number: ServicePort, Name: "http", Protocol: "HTTP", TargetPort: EndpointPort}},
		Location:         networking.ServiceEntry_MESH_INTERNAL,
		Resolution:       networking.ServiceEntry_STATIC,
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": fmt.Sprintf("svc-%d", s)}},
	})
}

func (w *Workload) workloadEntry(s, c, e int, address string) *meshconfig.Object {
	region, zone := w.Locality(c)
	return w.object("WorkloadEntry", w.Namespace(s), fmt.Sprintf("svc-%d-%s-%d", s, w.Clusters[c], e), nil, &networking.WorkloadEntry{
		Address:  address,
		Ports:    map[string]uint32{"http": EndpointPort},
		Labels:   map[string]string{"app": fmt.Sprintf("svc-%d", s)},
		Locality: region + "/" + zone,
	})
}

func (w *Workload) destinationRule(lb networking.LoadBalancerSettings_SimpleLB) *meshconfig.Object {
	return w.object("DestinationRule", w.Namespace(w.edited), fmt.Sprintf("svc-%d", w.edited), nil, &networking.DestinationRule{
		Host: w.hostname[w.edited],
		TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
			LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: lb}}},
	})
}

// Ingress gateways: the labels their proxies carry and their namespace.
const (
	GatewayNamespace = "istio-system"
	gatewayPort      = 8080
)

// GatewayLabels are the labels of the gateway proxies.
var GatewayLabels = map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}

func (w *Workload) ingress() []*meshconfig.Object {
	gw := w.object("Gateway", GatewayNamespace, "ingress", nil, &networking.Gateway{
		Selector: map[string]string{"istio": "ingressgateway"},
		Servers:  []*networking.Server{{Port: &networking.Port{Number: gatewayPort, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}}},
	})
	vs := &networking.VirtualService{Hosts: []string{"shop.example.com"}, Gateways: []string{GatewayNamespace + "/ingress"}}
	for s := range min(10, w.Services) {
		vs.Http = append(vs.Http, &networking.HTTPRoute{
			Match: []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: fmt.Sprintf("/svc-%d/", s)}}}},
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: w.hostname[s], Port: &networking.PortSelector{Number: ServicePort}}}},
		})
	}
	return []*meshconfig.Object{gw, w.object("VirtualService", GatewayNamespace, "ingress", nil, vs)}
}

// EditFanOut changes the load balancer of the edited service's
// DestinationRule (ROUND_ROBIN and LEAST_REQUEST in turn): every proxy
// that sees that service gets a changed cluster. It returns the first cluster's new state.
func (w *Workload) EditFanOut() []*meshconfig.Object {
	w.drEdits++
	lb := networking.LoadBalancerSettings_LEAST_REQUEST
	if w.drEdits%2 == 0 {
		lb = networking.LoadBalancerSettings_ROUND_ROBIN
	}
	w.objects[0][w.drIndex] = w.destinationRule(lb)
	return w.Objects(0)
}

// Move is one endpoint move: service Service's endpoint in cluster
// Cluster now has address Address.
type Move struct {
	Service, Cluster int
	Address          string
}

// MoveEndpoint gives endpoint e of service s in cluster c a new address
// never used before, and returns the move and the cluster's new state.
func (w *Workload) MoveEndpoint(s, c, e int) (Move, []*meshconfig.Object) {
	w.moves++
	if w.moves >= rangeSize {
		w.moves = 1 // wrapped after 4 million moves: addresses repeat
	}
	m := Move{Service: s, Cluster: c, Address: addr(movedBase, w.moves)}
	w.objects[c][w.entries[c][s*w.EndpointsPerCluster+e]] = w.workloadEntry(s, c, e, m.Address)
	return m, w.Objects(c)
}
