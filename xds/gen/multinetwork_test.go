package gen

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// The multi-network fixture: ratings runs in cluster c1 (network net-a,
// one endpoint) and c2 (net-b, two endpoints); c2's east-west gateway is
// a LoadBalancer Service labelled topology.istio.io/network: net-b at
// 203.0.113.10, whose pods serve an AUTO_PASSTHROUGH Gateway on 15443.
const (
	multiNetworkC1 = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings-c1, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  addresses: [10.96.0.50]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  endpoints:
  - {address: 10.1.1.1, network: net-a, locality: us-east/a, serviceAccount: ratings, labels: {app: ratings, security.istio.io/tlsMode: istio}}
`
	multiNetworkC2 = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings-c2, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  addresses: [10.96.0.50]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  endpoints:
  - {address: 10.2.1.1, network: net-b, locality: us-west/b, serviceAccount: ratings, labels: {app: ratings, security.istio.io/tlsMode: istio}}
  - {address: 10.2.1.2, network: net-b, locality: us-west/b, serviceAccount: ratings, labels: {app: ratings, security.istio.io/tlsMode: istio}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network-gateway, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    tls: {mode: AUTO_PASSTHROUGH}
    hosts: ["*.local"]
`
	multiNetworkGatewayIP = "203.0.113.10"
)

// multiNetworkSnapshot builds the fixture, with c2's gateway Service at
// gatewayIP.
func multiNetworkSnapshot(t testing.TB, gatewayIP string) *mesh.Snapshot {
	t.Helper()
	var in []mesh.ClusterInput
	for _, c := range []struct{ name, y string }{{"c1", multiNetworkC1}, {"c2", multiNetworkC2}} {
		objs, errs := meshconfig.DecodeYAML([]byte(c.y), c.name+".yaml")
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if c.name == "c2" {
			gw := gentest.Registry(t, "Service", "istio-eastwestgateway", "istio-system", &meshconfigv1.Service{
				Hostname: "istio-eastwestgateway.istio-system.svc.cluster.local", Addresses: []string{"10.96.0.99"},
				ExternalAddresses: []string{gatewayIP},
				Ports:             []*meshconfigv1.ServicePort{{Name: "tls", Number: 15443, Protocol: "TLS"}}})
			gw.Labels = map[string]string{mesh.NetworkLabel: "net-b", "istio": "eastwestgateway"}
			objs = append(objs, gw)
		}
		in = append(in, mesh.ClusterInput{Name: c.name, Synced: true, Connected: true, Objects: objs})
	}
	return mesh.Build("m", in)
}

var (
	multiNetworkClient = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=productpage", IPs: "10.1.9.9",
		Network: "net-a", Cluster: "c1", Locality: mesh.ParseLocality("us-east/a")}
	multiNetworkEdge = proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=eastwestgateway", IPs: "10.2.0.2",
		SDSCluster: "sds-grpc", Network: "net-b", Cluster: "c2", Locality: mesh.ParseLocality("us-west/b")}
	multiNetworkRatings = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=ratings\nsecurity.istio.io/tlsMode=istio", IPs: "10.2.1.1",
		Network: "net-b", Cluster: "c2", Locality: mesh.ParseLocality("us-west/b")}
)

// TestGoldenMultiNetwork: a sidecar on net-a calling ratings (net-a
// direct, net-b through its gateway) and net-b's east-west gateway
// (SNI-DNAT clusters of net-b's endpoints only), every resource valid.
func TestGoldenMultiNetwork(t *testing.T) {
	snap := multiNetworkSnapshot(t, multiNetworkGatewayIP)
	for name, k := range map[string]proxy.Key{"multinetwork-sidecar-net-a": multiNetworkClient, "multinetwork-eastwest-net-b": multiNetworkEdge} {
		t.Run(name, func(t *testing.T) {
			out := Envoy(snap, k)
			gentest.ValidateAll(t, out)
			gentest.CheckGolden(t, filepath.Join("testdata", "golden", name+".json"), goldenJSON(t, out), *update, "go test ./xds/gen/ -run TestGoldenMultiNetwork -update")
		})
	}
}

// TestMultiNetworkRequestPath: the request path across networks, in the
// simulator: the net-a sidecar reaches ratings directly on net-a and
// through net-b's gateway (weight 2: the two endpoints it stands for)
// with mesh mTLS and the cluster's SNI; the gateway routes that SNI,
// still encrypted, to net-b's endpoints only; net-b's sidecar terminates
// the client's mTLS and sees its identity.
func TestMultiNetworkRequestPath(t *testing.T) {
	snap := multiNetworkSnapshot(t, multiNetworkGatewayIP)
	const clientID = "spiffe://cluster.local/ns/shop/sa/productpage"
	sims := map[proxy.Key]*envoysim.Sim{}
	for _, k := range []proxy.Key{multiNetworkClient, multiNetworkEdge, multiNetworkRatings} {
		out := Envoy(snap, k)
		gentest.ValidateAll(t, out)
		sims[k] = envoysim.New(out.Resources)
	}
	r := sims[multiNetworkClient].Do(envoysim.Request{IP: "10.96.0.50", Port: 9080, Authority: "ratings.shop.svc.cluster.local:9080", Path: "/", Method: "GET"})
	if r.Err != nil || len(r.Clusters) != 1 {
		t.Fatalf("client: %v, clusters %v", r.Err, envoysim.ClusterNames(r.Clusters))
	}
	var got []string
	for _, e := range r.Clusters[0].Endpoints {
		got = append(got, fmt.Sprintf("%s:%d/%d %s", e.Address, e.Port, e.Weight, e.Locality))
	}
	want := []string{"10.1.1.1:9080/1 us-east/a", multiNetworkGatewayIP + ":15443/2 us-west/b"}
	if !slices.Equal(got, want) {
		t.Fatalf("client endpoints %v, want %v", got, want)
	}
	up, err := r.Clusters[0].Endpoints[1].UpstreamTLS()
	if err != nil || up == nil {
		t.Fatalf("client originates no TLS to the gateway: %v", err)
	}
	sni, alpn := up.GetSni(), up.GetCommonTlsContext().GetAlpnProtocols()
	if sni != envoy.IstioMutualSNI("ratings.shop.svc.cluster.local", 9080, "") {
		t.Errorf("client SNI %s", sni)
	}
	if ok, err := r.Clusters[0].Endpoints[1].AcceptsServer("spiffe://cluster.local/ns/shop/sa/ratings"); !ok || err != nil {
		t.Errorf("the client does not accept ratings' identity through the gateway: %v", err)
	}

	g := sims[multiNetworkEdge].Do(envoysim.Request{ListenerPort: 15443, SNI: sni, ALPN: alpn, PeerCert: clientID})
	if g.Err != nil || g.Denied != "" || g.TLSTerminated || len(g.TCP) != 1 || g.TCP[0].Name != sni {
		t.Fatalf("gateway: err %v denied %q terminated %v tcp %v", g.Err, g.Denied, g.TLSTerminated, envoysim.ClusterNames(g.TCP))
	}
	if got := g.TCP[0].Addresses(0); !slices.Equal(got, []string{"10.2.1.1:9080", "10.2.1.2:9080"}) {
		t.Errorf("gateway forwards to %v, want net-b's endpoints only", got)
	}
	if ts := g.TCP[0].Endpoints[0].TransportSocket; ts != nil {
		t.Errorf("gateway originates TLS of its own: %v", ts)
	}

	// What grpc-go 1.85 would send through the gateway at best (the SNI
	// only with GRPC_EXPERIMENTAL_XDS_SNI; its ALPN is always h2): no
	// chain takes it, which is why proxyless clients get no gateways.
	if p := sims[multiNetworkEdge].Do(envoysim.Request{ListenerPort: 15443, SNI: sni, ALPN: []string{"h2"}, PeerCert: clientID}); p.Err == nil || len(p.TCP) != 0 {
		t.Errorf("the gateway forwards grpc-go's handshake (ALPN h2) to %v", envoysim.ClusterNames(p.TCP))
	}

	d := sims[multiNetworkRatings].Do(envoysim.Request{Inbound: true, IP: "10.2.1.1", Port: 9080, SNI: sni, ALPN: alpn, PeerCert: clientID,
		Authority: "ratings.shop.svc.cluster.local:9080", Path: "/", Method: "GET"})
	if d.Err != nil || !d.TLSTerminated || d.Peer != clientID {
		t.Errorf("destination: err %v terminated %v peer %q denied %q", d.Err, d.TLSTerminated, d.Peer, d.Denied)
	}
}
