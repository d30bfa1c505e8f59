package proxyless

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
)

const host = "echo.demo.svc.cluster.local"

const config = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v1, namespace: demo}
spec: {address: 10.0.0.1, ports: {grpc: 17071}, labels: {app: echo, version: v1}, locality: us-east/zone-a, weight: 3}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v2, namespace: demo}
spec: {address: 10.0.0.2, labels: {app: echo, version: v2}, locality: us-east/zone-b}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - match: [{headers: {x-user: {exact: beta}}, uri: {prefix: /grpc.health}}]
    route: [{destination: {host: echo, subset: v2}}]
    fault: {abort: {grpcStatus: UNAVAILABLE, percentage: {value: 12.5}}}
  - route:
    - {destination: {host: echo, subset: v1}, weight: 80}
    - {destination: {host: echo, subset: nope}, weight: 20}
    timeout: 3s
    retries: {attempts: 2, perTryTimeout: 1s, retryOn: unavailable}
`

func TestGRPCResourcesValidateAndRoute(t *testing.T) {
	out := Generate(gentest.Snapshot(t, map[string]string{"c1": config}), build.Client{})
	gentest.ValidateAll(t, out)
	if n := len(out.Resources[typeurl.Cluster]); n != 3 {
		t.Errorf("clusters = %d, want 3 (base + 2 subsets)", n)
	}

	name := ListenerName(host, 7070)
	l, _ := gentest.ByName(out, typeurl.Listener, name).Message.(*listenerv3.Listener)
	if l == nil {
		t.Fatalf("no listener %s", name)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := l.GetApiListener().GetApiListener().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	filters := hcm.GetHttpFilters()
	if hcm.GetRds().GetRouteConfigName() != name || filters[len(filters)-1].GetName() != build.RouterFilter {
		t.Fatalf("listener HCM: rds %q, last filter %q", hcm.GetRds().GetRouteConfigName(), filters[len(filters)-1].GetName())
	}

	rc, _ := gentest.ByName(out, typeurl.Route, name).Message.(*routev3.RouteConfiguration)
	routes := rc.GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 2 {
		t.Fatalf("routes = %d, want 2", len(routes))
	}
	beta := routes[0]
	if beta.GetMatch().GetPrefix() != "/grpc.health" || beta.GetMatch().GetHeaders()[0].GetStringMatch().GetExact() != "beta" ||
		beta.GetRoute().GetCluster() != build.ClusterName(host, 7070, "v2") {
		t.Errorf("header route = %v", beta)
	}
	if _, ok := beta.GetTypedPerFilterConfig()[build.FaultFilter]; !ok {
		t.Errorf("header route has no fault override")
	}
	split := routes[1].GetRoute()
	wc := split.GetWeightedClusters().GetClusters()
	if len(wc) != 2 || wc[0].GetName() != build.ClusterName(host, 7070, "v1") || wc[0].GetWeight().GetValue() != 80 || wc[1].GetWeight().GetValue() != 20 {
		t.Errorf("weighted clusters = %v", wc)
	}
	if split.GetMaxStreamDuration().GetMaxStreamDuration().AsDuration().Seconds() != 3 || split.GetRetryPolicy().GetNumRetries().GetValue() != 2 {
		t.Errorf("timeout/retries = %v / %v", split.GetMaxStreamDuration(), split.GetRetryPolicy())
	}

	cla, _ := gentest.ByName(out, typeurl.Endpoint, build.ClusterName(host, 7070, "v1")).Message.(*endpointv3.ClusterLoadAssignment)
	eps := cla.GetEndpoints()
	if len(eps) != 1 || eps[0].GetLoadBalancingWeight().GetValue() != 3 || eps[0].GetLocality().GetZone() != "zone-a" ||
		eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue() != 17071 {
		t.Errorf("v1 endpoints = %v", eps)
	}
	v2, _ := gentest.ByName(out, typeurl.Endpoint, build.ClusterName(host, 7070, "v2")).Message.(*endpointv3.ClusterLoadAssignment)
	if port := v2.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); port != 7070 {
		t.Errorf("v2 endpoint port = %d, want the service port 7070 (no port mapping)", port)
	}

	var found bool
	for _, p := range out.Problems {
		if strings.Contains(p.Field, "subset") && strings.Contains(p.Reason, `"nope"`) && strings.Contains(p.Resource, "VirtualService demo/echo") {
			found = true
		}
	}
	if !found {
		t.Errorf("missing subset not reported; problems: %+v", out.Problems)
	}
}

func TestGRPCIsDeterministic(t *testing.T) {
	s := gentest.Snapshot(t, map[string]string{"c1": config, "c2": config})
	a, b := Generate(s, build.Client{}), Generate(s, build.Client{})
	for typeURL, rs := range a.Resources {
		for i, r := range rs {
			if b.Resources[typeURL][i].Name != r.Name {
				t.Fatalf("order differs for %s", typeURL)
			}
		}
	}
	// The same definitions in two clusters agree: no conflict, and a
	// WorkloadEntry (config) defined in both is one endpoint, not two.
	if len(s.Conflicts) != 0 {
		t.Errorf("conflicts = %+v", s.Conflicts)
	}
	if n := len(s.Services[host].Endpoints); n != 2 {
		t.Errorf("endpoints = %d, want 2", n)
	}
}

func TestConflictOldestWinsThenClusterName(t *testing.T) {
	other := strings.Replace(config, "weight: 80}", "weight: 70}", 1)
	other = strings.Replace(other, "subset: nope}, weight: 20}", "subset: nope}, weight: 30}", 1)
	s := gentest.Snapshot(t, map[string]string{"b-cluster": other, "a-cluster": config})
	if len(s.Conflicts) != 1 || s.Conflicts[0].WinnerCluster != "a-cluster" || s.Conflicts[0].LoserCluster != "b-cluster" {
		t.Fatalf("conflicts = %+v", s.Conflicts)
	}
	// An older creation time beats the cluster name.
	older := strings.Replace(other, "metadata: {name: echo, namespace: demo}\nspec:\n  hosts: [echo]",
		"metadata: {name: echo, namespace: demo, creationTimestamp: \"2020-01-01T00:00:00Z\"}\nspec:\n  hosts: [echo]", 1)
	s = gentest.Snapshot(t, map[string]string{"b-cluster": older, "a-cluster": config})
	if len(s.Conflicts) != 1 || s.Conflicts[0].WinnerCluster != "b-cluster" {
		t.Fatalf("conflicts with an older definition in b-cluster = %+v", s.Conflicts)
	}
	vs := s.VirtualServices[host][0].VirtualService()
	if w := vs.GetHttp()[1].GetRoute()[0].GetWeight(); w != 70 {
		t.Fatalf("winning VirtualService has weight %d, want b-cluster's 70", w)
	}
}

// TestGRPCEndpointsMatchFullGeneration: the endpoints generated for some
// hosts are exactly full generation's assignments of those hosts.
func TestGRPCEndpointsMatchFullGeneration(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": config})
	full := Generate(snap, build.Client{})
	for _, host := range snap.Hostnames() {
		got := Endpoints(snap, map[string]bool{host: true}, build.Client{})
		if len(got) == 0 {
			t.Fatalf("%s: no endpoints generated", host)
		}
		var want []build.Resource
		for _, r := range full.Resources[typeurl.Endpoint] {
			if strings.HasSuffix(r.Name, "|"+host) {
				want = append(want, r)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d assignments, full generation has %d", host, len(got), len(want))
		}
		for i := range got {
			if got[i].Name != want[i].Name || !proto.Equal(got[i].Message, want[i].Message) {
				t.Errorf("%s: assignment %s differs from full generation's %s", host, got[i].Name, want[i].Name)
			}
		}
	}
	if got := Endpoints(snap, map[string]bool{"absent.example": true}, build.Client{}); len(got) != 0 {
		t.Errorf("an unknown host generated %d assignments", len(got))
	}
}

// TestGRPCClusterPolicyMerge: proxyless clusters merge traffic policies as
// the Envoy generator does (TrafficPolicyFor): a subset's policy without a
// load balancer keeps the rule's, and a port-level setting overrides only
// what it sets.
func TestGRPCClusterPolicyMerge(t *testing.T) {
	y := strings.Replace(config, `  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}`, `  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN}
    portLevelSettings: [{port: {number: 7070}, connectionPool: {tcp: {maxConnections: 5}}}]
  subsets:
  - {name: v1, labels: {version: v1}, trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}}
  - {name: v2, labels: {version: v2}, trafficPolicy: {portLevelSettings: [{port: {number: 7070}, loadBalancer: {simple: LEAST_REQUEST}}]}}`, 1)
	out := Generate(gentest.Snapshot(t, map[string]string{"c1": y}), build.Client{})
	for subset, want := range map[string]clusterv3.Cluster_LbPolicy{"": clusterv3.Cluster_ROUND_ROBIN, "v1": clusterv3.Cluster_ROUND_ROBIN, "v2": clusterv3.Cluster_LEAST_REQUEST} {
		c, _ := gentest.ByName(out, typeurl.Cluster, build.ClusterName(host, 7070, subset)).Message.(*clusterv3.Cluster)
		if c.GetLbPolicy() != want {
			t.Errorf("subset %q: lb policy %v, want %v", subset, c.GetLbPolicy(), want)
		}
	}
}

// TestGRPCClusterDefaultLeastRequest: without a load balancer setting a
// proxyless cluster balances LEAST_REQUEST, Istio's default (grpc-go
// implements it, gRFC A48).
func TestGRPCClusterDefaultLeastRequest(t *testing.T) {
	y := strings.Replace(config, "  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}\n", "", 1)
	if y == config {
		t.Fatal("fixture changed: no trafficPolicy line to remove")
	}
	out := Generate(gentest.Snapshot(t, map[string]string{"c1": y}), build.Client{})
	c, _ := gentest.ByName(out, typeurl.Cluster, build.ClusterName(host, 7070, "")).Message.(*clusterv3.Cluster)
	if c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST {
		t.Errorf("lb policy %v, want LEAST_REQUEST", c.GetLbPolicy())
	}
	// grpc-go weights localities only under ROUND_ROBIN: a policy that
	// distributes keeps it.
	y = strings.Replace(config, "  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}\n",
		"  trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: \"r1/*\", to: {\"r1/*\": 80, \"r2/*\": 20}}]}}}\n", 1)
	out = Generate(gentest.Snapshot(t, map[string]string{"c1": y}), build.Client{})
	c, _ = gentest.ByName(out, typeurl.Cluster, build.ClusterName(host, 7070, "")).Message.(*clusterv3.Cluster)
	if c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
		t.Errorf("with distribute: lb policy %v, want ROUND_ROBIN (grpc-go's locality weights)", c.GetLbPolicy())
	}
}
