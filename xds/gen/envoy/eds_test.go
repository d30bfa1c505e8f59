package envoy

import (
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

func claOf(t *testing.T, out *build.Output, name string) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	cla, _ := gentest.ByName(out, typeurl.Endpoint, name).Message.(*endpointv3.ClusterLoadAssignment)
	if cla == nil {
		t.Fatalf("no EDS resource %s; have %v", name, gentest.Names(out.Resources[typeurl.Endpoint]))
	}
	return cla
}

// layout renders an assignment as "P<priority> <locality> [addr:port/weight/health ...] w=<locality weight>"
// lines, for compact assertions. An endpoint's weight is the one Envoy and
// grpc-go take (unset: 1); one sent as 1, which it need not be (decision
// 055), is marked "/explicit-1".
func layout(cla *endpointv3.ClusterLoadAssignment) string {
	var b strings.Builder
	for _, l := range cla.GetEndpoints() {
		loc := l.GetLocality()
		fmt.Fprintf(&b, "P%d %s/%s/%s w=%d", l.GetPriority(), loc.GetRegion(), loc.GetZone(), loc.GetSubZone(), l.GetLoadBalancingWeight().GetValue())
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			w := e.GetLoadBalancingWeight()
			fmt.Fprintf(&b, " %s:%d/%d", sa.GetAddress(), sa.GetPortValue(), max(1, w.GetValue()))
			if w != nil && w.GetValue() == 1 {
				b.WriteString("/explicit-1")
			}
			if e.GetHealthStatus() != corev3.HealthStatus_HEALTHY {
				b.WriteString("/" + e.GetHealthStatus().String())
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestEnvoyEndpointsLocalitiesWeightsHealth(t *testing.T) {
	y := reviewsConfig + dr(`  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: none, labels: {version: v9}}
`)
	s := gentest.Snapshot(t, map[string]string{"c1": y})
	// Health comes from the registry; set it here as a spoke would.
	for _, ep := range s.Services[cdsReviews].Endpoints {
		switch ep.Address {
		case "10.0.0.2":
			ep.Health = mesh.Unhealthy
		case "10.0.0.3":
			ep.Health = mesh.Terminating
		case "10.0.0.4":
			ep.Stale = true // disconnected cluster, within the grace period
		}
	}
	out := generate(s, sidecarKey("demo", mesh.Locality{}))
	gentest.ValidateAll(t, out)

	got := layout(claOf(t, out, build.ClusterName(cdsReviews, 9080, "")))
	want := "P0 eu/zone-a/ w=1 10.0.0.4:9080/1\n" +
		"P0 us-east/zone-a/ w=2 10.0.0.1:19080/2\n" +
		"P0 us-east/zone-b/ w=1 10.0.0.2:9080/1/UNHEALTHY\n" +
		"P0 us-west/zone-a/ w=1 10.0.0.3:9080/1/DRAINING\n"
	if got != want {
		t.Errorf("http assignment:\n%s\nwant:\n%s", got, want)
	}
	if got := layout(claOf(t, out, build.ClusterName(cdsReviews, 3306, "v1"))); got != "P0 eu/zone-a/ w=1 10.0.0.4:13306/1\nP0 us-east/zone-a/ w=2 10.0.0.1:13306/2\n" {
		t.Errorf("tcp v1 assignment (targetPort; subset labels):\n%s", got)
	}
	if cla := claOf(t, out, build.ClusterName(cdsReviews, 9080, "none")); len(cla.GetEndpoints()) != 0 {
		t.Errorf("subset without endpoints = %v, want an empty assignment", cla)
	}
	if len(out.Problems) != 0 {
		t.Errorf("problems = %+v", out.Problems)
	}
}

func TestEnvoyEndpointsOtherNetworkLeftOut(t *testing.T) {
	const y = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.demo.svc.cluster.local]
  resolution: STATIC
  ports: [{number: 5432, name: pg, protocol: TCP}]
  endpoints:
  - {address: 10.0.0.1, network: net-a}
  - {address: 10.1.0.1, network: net-b}
  - {address: 10.2.0.1}
`
	name := build.ClusterName("db.demo.svc.cluster.local", 5432, "")
	for _, tt := range []struct{ network, want string }{
		{"net-a", "10.0.0.1 10.2.0.1"},
		{"net-b", "10.1.0.1 10.2.0.1"},
		{"", "10.0.0.1 10.1.0.1 10.2.0.1"},
	} {
		key := sidecarKey("demo", mesh.Locality{})
		key.Network = tt.network
		out := envoyOut(t, y, key)
		var got []string
		for _, l := range claOf(t, out, name).GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				got = append(got, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("proxy on network %q sees %v, want %s", tt.network, got, tt.want)
		}
		if len(out.Problems) != 0 {
			t.Errorf("problems = %+v", out.Problems)
		}
	}
}

func TestEnvoyEndpointsLocalityFailover(t *testing.T) {
	failover := reviewsConfig + dr(`  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3}
    loadBalancer: {localityLbSetting: {failover: [{from: us-east, to: eu}]}}
`)
	tests := []struct {
		name     string
		y        string
		locality mesh.Locality
		want     string
		problem  string
	}{
		{name: "us-east/zone-a with failover to eu", y: failover, locality: mesh.Locality{Region: "us-east", Zone: "zone-a"},
			want: "P0 us-east/zone-a/ w=2 10.0.0.1:19080/2\n" +
				"P1 us-east/zone-b/ w=1 10.0.0.2:9080/1\n" +
				"P2 eu/zone-a/ w=1 10.0.0.4:9080/1\n" +
				"P3 us-west/zone-a/ w=1 10.0.0.3:9080/1\n"},
		{name: "us-west/zone-a: no failover entry, other regions last", y: failover, locality: mesh.Locality{Region: "us-west", Zone: "zone-a"},
			want: "P0 us-west/zone-a/ w=1 10.0.0.3:9080/1\n" +
				"P1 eu/zone-a/ w=1 10.0.0.4:9080/1\n" +
				"P1 us-east/zone-a/ w=2 10.0.0.1:19080/2\n" +
				"P1 us-east/zone-b/ w=1 10.0.0.2:9080/1\n"},
		{name: "proxy without a locality: no priorities", y: failover,
			want: "P0 eu/zone-a/ w=1 10.0.0.4:9080/1\n" +
				"P0 us-east/zone-a/ w=2 10.0.0.1:19080/2\n" +
				"P0 us-east/zone-b/ w=1 10.0.0.2:9080/1\n" +
				"P0 us-west/zone-a/ w=1 10.0.0.3:9080/1\n"},
		{name: "outlier detection alone prioritizes by proximity", y: reviewsConfig + dr(`  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3}
`), locality: mesh.Locality{Region: "eu", Zone: "zone-a"},
			want: "P0 eu/zone-a/ w=1 10.0.0.4:9080/1\n" +
				"P1 us-east/zone-a/ w=2 10.0.0.1:19080/2\n" +
				"P1 us-east/zone-b/ w=1 10.0.0.2:9080/1\n" +
				"P1 us-west/zone-a/ w=1 10.0.0.3:9080/1\n"},
		{name: "failover without outlier detection is reported and ignored", y: reviewsConfig + dr(`  trafficPolicy:
    loadBalancer: {localityLbSetting: {failover: [{from: us-east, to: eu}]}}
`), locality: mesh.Locality{Region: "us-east", Zone: "zone-a"}, problem: "outlierDetection",
			want: "P0 eu/zone-a/ w=1 10.0.0.4:9080/1\n" +
				"P0 us-east/zone-a/ w=2 10.0.0.1:19080/2\n" +
				"P0 us-east/zone-b/ w=1 10.0.0.2:9080/1\n" +
				"P0 us-west/zone-a/ w=1 10.0.0.3:9080/1\n"},
		{name: "disabled", y: reviewsConfig + dr(`  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3}
    loadBalancer: {localityLbSetting: {enabled: false}}
`), locality: mesh.Locality{Region: "us-east", Zone: "zone-a"},
			want: "P0 eu/zone-a/ w=1 10.0.0.4:9080/1\n" +
				"P0 us-east/zone-a/ w=2 10.0.0.1:19080/2\n" +
				"P0 us-east/zone-b/ w=1 10.0.0.2:9080/1\n" +
				"P0 us-west/zone-a/ w=1 10.0.0.3:9080/1\n"},
		{name: "failoverPriority by label then region", y: reviewsConfig + dr(`  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3}
    loadBalancer: {localityLbSetting: {failoverPriority: [version, topology.kubernetes.io/region]}}
`), locality: mesh.Locality{Region: "us-east", Zone: "zone-b"},
			// proxy labels version=v2: v2 in us-east P0, v2 elsewhere P1, v1 P2.
			want: "P0 us-east/zone-b/ w=1 10.0.0.2:9080/1\n" +
				"P1 us-west/zone-a/ w=1 10.0.0.3:9080/1\n" +
				"P2 eu/zone-a/ w=1 10.0.0.4:9080/1\n" +
				"P2 us-east/zone-a/ w=2 10.0.0.1:19080/2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := sidecarKey("demo", tt.locality)
			key.Labels = "app=productpage\nversion=v2"
			out := envoyOut(t, tt.y, key)
			if got := layout(claOf(t, out, build.ClusterName(cdsReviews, 9080, ""))); got != tt.want {
				t.Errorf("assignment:\n%s\nwant:\n%s", got, tt.want)
			}
			if tt.problem != "" && !hasProblem(out, "spec.trafficPolicy.loadBalancer.localityLbSetting", tt.problem) {
				t.Errorf("problems = %+v", out.Problems)
			}
			if tt.problem == "" && len(out.Problems) != 0 {
				t.Errorf("problems = %+v", out.Problems)
			}
		})
	}
}

func TestEnvoyEndpointsLocalityDistribute(t *testing.T) {
	y := reviewsConfig + dr(`  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        distribute:
        - from: us-east/zone-a/*
          to: {"us-east/*": 80, "eu/zone-a": 20}
`)
	out := envoyOut(t, y, sidecarKey("demo", mesh.Locality{Region: "us-east", Zone: "zone-a"}))
	// us-east's 80 is shared by its two localities (one endpoint each);
	// us-west matches no pattern and gets no traffic.
	want := "P0 eu/zone-a/ w=20000 10.0.0.4:9080/1\n" +
		"P0 us-east/zone-a/ w=40000 10.0.0.1:19080/2\n" +
		"P0 us-east/zone-b/ w=40000 10.0.0.2:9080/1\n"
	if got := layout(claOf(t, out, build.ClusterName(cdsReviews, 9080, ""))); got != want {
		t.Errorf("assignment:\n%s\nwant:\n%s", got, want)
	}
	if clusterOf(t, out, build.ClusterName(cdsReviews, 9080, "")).GetCommonLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Errorf("cluster lacks locality_weighted_lb_config")
	}

	// A proxy elsewhere is not distributed.
	out = envoyOut(t, y, sidecarKey("demo", mesh.Locality{Region: "eu", Zone: "zone-a"}))
	if c := clusterOf(t, out, build.ClusterName(cdsReviews, 9080, "")); c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil {
		t.Errorf("eu proxy: cluster has locality weighting")
	}
	if n := len(claOf(t, out, build.ClusterName(cdsReviews, 9080, "")).GetEndpoints()); n != 4 {
		t.Errorf("eu proxy: %d localities, want all 4", n)
	}
}

// A router reads endpoints the same way (its outbound clusters).
func TestEnvoyEndpointsRouter(t *testing.T) {
	key := sidecarKey("istio-system", mesh.Locality{})
	key.Type = proxy.Router
	out := envoyOut(t, reviewsConfig, key)
	if n := len(claOf(t, out, build.ClusterName(cdsReviews, 7070, "")).GetEndpoints()); n != 4 {
		t.Errorf("router localities = %d", n)
	}
}
