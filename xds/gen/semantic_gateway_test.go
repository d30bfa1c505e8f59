package gen_test

import (
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// TestGatewayTLSModeSemantics walks the mesh gateway of gentest.Mesh with
// the simulator: AUTO_PASSTHROUGH carries a sidecar's mesh mTLS to the
// destination's sidecar untouched (the path an east-west gateway gives
// traffic between networks), ISTIO_MUTUAL terminates the mesh's mTLS and
// requires a mesh identity, OPTIONAL_MUTUAL lets a client without a
// certificate through.
func TestGatewayTLSModeSemantics(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh})
	var (
		client   = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=productpage", IPs: "10.1.9.9", Locality: mesh.ParseLocality("us-east/a")}
		edge     = proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=eastwestgateway", IPs: "10.3.0.2", SDSCluster: "sds-grpc", Locality: mesh.ParseLocality("us-east/a")}
		ratings  = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=ratings\nsecurity.istio.io/tlsMode=istio", IPs: "10.1.1.1", Locality: mesh.ParseLocality("us-east/a")}
		clientID = "spiffe://cluster.local/ns/shop/sa/productpage"
	)
	sims := map[proxy.Key]*envoysim.Sim{}
	for _, k := range []proxy.Key{client, edge, ratings} {
		out := gen.Envoy(snap, k)
		gentest.ValidateAll(t, out)
		sims[k] = envoysim.New(out.Resources)
	}

	t.Run("AUTO_PASSTHROUGH: the client's mTLS reaches the destination's sidecar", func(t *testing.T) {
		// The client sidecar: to ratings, mTLS to its injected endpoint.
		r := sims[client].Do(envoysim.Request{IP: "10.96.0.11", Port: 9080, Authority: "ratings.shop.svc.cluster.local:9080", Path: "/", Method: "GET"})
		if r.Err != nil || len(r.Clusters) != 1 {
			t.Fatalf("client: %v, clusters %v", r.Err, envoysim.ClusterNames(r.Clusters))
		}
		i := slices.IndexFunc(r.Clusters[0].Endpoints, func(e envoysim.Endpoint) bool { return e.Address == "10.1.1.1" })
		up, err := r.Clusters[0].Endpoints[i].UpstreamTLS()
		if err != nil || up == nil {
			t.Fatalf("client originates no TLS to 10.1.1.1: %v", err)
		}
		sni, alpn := up.GetSni(), up.GetCommonTlsContext().GetAlpnProtocols()
		if sni != envoy.IstioMutualSNI("ratings.shop.svc.cluster.local", 9080, "") {
			t.Errorf("client SNI %s", sni)
		}

		// The gateway: by SNI and ALPN to the SNI-DNAT cluster, TLS kept.
		g := sims[edge].Do(envoysim.Request{ListenerPort: 15443, SNI: sni, ALPN: alpn, PeerCert: clientID})
		if g.Err != nil || g.Denied != "" || g.TLSTerminated || len(g.TCP) != 1 || g.TCP[0].Name != sni {
			t.Fatalf("gateway: err %v denied %q terminated %v tcp %v", g.Err, g.Denied, g.TLSTerminated, envoysim.ClusterNames(g.TCP))
		}
		if got := g.TCP[0].Addresses(0); !slices.Equal(got, []string{"10.1.1.1:9080"}) {
			t.Errorf("gateway forwards to %v, want only the endpoint that accepts mTLS", got)
		}
		if ts := g.TCP[0].Endpoints[0].TransportSocket; ts != nil {
			t.Errorf("gateway originates TLS of its own: %v", ts)
		}

		// The destination's sidecar terminates the client's mTLS and sees
		// the client's identity.
		d := sims[ratings].Do(envoysim.Request{Inbound: true, IP: "10.1.1.1", Port: 9080, SNI: sni, ALPN: alpn, PeerCert: clientID,
			Authority: "ratings.shop.svc.cluster.local:9080", Path: "/", Method: "GET"})
		if d.Err != nil || !d.TLSTerminated || d.Peer != clientID {
			t.Errorf("destination: err %v terminated %v peer %q denied %q", d.Err, d.TLSTerminated, d.Peer, d.Denied)
		}
	})
	t.Run("AUTO_PASSTHROUGH: TLS without a mesh ALPN finds no chain", func(t *testing.T) {
		g := sims[edge].Do(envoysim.Request{ListenerPort: 15443, SNI: envoy.IstioMutualSNI("ratings.shop.svc.cluster.local", 9080, ""), ALPN: []string{"h2"}})
		if g.Err == nil || len(g.TCP) != 0 {
			t.Errorf("forwarded to %v", envoysim.ClusterNames(g.TCP))
		}
	})
	t.Run("AUTO_PASSTHROUGH: a service the hosts do not match has no chain", func(t *testing.T) {
		g := sims[edge].Do(envoysim.Request{ListenerPort: 15443, SNI: envoy.IstioMutualSNI("api.payments.example", 443, ""), ALPN: []string{"istio"}})
		if g.Err == nil {
			t.Errorf("forwarded to %v", envoysim.ClusterNames(g.TCP))
		}
	})
	mtls := func(sni, peer string) envoysim.Request {
		return envoysim.Request{ListenerPort: 8443, SNI: sni, PeerCert: peer, Authority: sni, Path: "/", Method: "GET"}
	}
	t.Run("ISTIO_MUTUAL: a mesh identity is routed", func(t *testing.T) {
		r := sims[edge].Do(mtls("internal.shop.example", clientID))
		if r.Err != nil || !r.TLSTerminated || r.Peer != clientID || !strings.HasPrefix(r.RouteConfig, "https.8443.") {
			t.Fatalf("err %v terminated %v peer %q route config %s", r.Err, r.TLSTerminated, r.Peer, r.RouteConfig)
		}
		wantClusters(t, r, "outbound|9080||ratings.shop.svc.cluster.local=1")
	})
	t.Run("ISTIO_MUTUAL: no client certificate, no connection", func(t *testing.T) {
		if r := sims[edge].Do(mtls("internal.shop.example", "")); !strings.Contains(r.Denied, "requires a client certificate") {
			t.Errorf("denied %q err %v", r.Denied, r.Err)
		}
	})
	t.Run("ISTIO_MUTUAL: an identity of another trust domain is refused", func(t *testing.T) {
		if r := sims[edge].Do(mtls("internal.shop.example", "spiffe://elsewhere.example/ns/a/sa/b")); r.Denied == "" {
			t.Errorf("accepted: clusters %v", envoysim.ClusterNames(r.Clusters))
		}
	})
	t.Run("OPTIONAL_MUTUAL: a client without a certificate is routed", func(t *testing.T) {
		r := sims[edge].Do(mtls("partner.shop.example", ""))
		if r.Err != nil || r.Denied != "" || !r.TLSTerminated {
			t.Fatalf("err %v denied %q", r.Err, r.Denied)
		}
		wantClusters(t, r, "outbound|9080||ratings.shop.svc.cluster.local=1")
	})
}

// TestGatewayVirtualHostsShared: hosts of a gateway route configuration
// with the same routes share one virtual host, and every host still
// routes as its VirtualServices say (with and without the port in the
// authority); a host with other routes keeps its own virtual host.
func TestGatewayVirtualHostsShared(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh + `---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shared, namespace: istio-system}
spec:
  selector: {istio: sharedgateway}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: abc, namespace: web, creationTimestamp: "2021-01-01T00:00:00Z"}
spec:
  hosts: [a.example.com, b.example.com, c.example.com]
  gateways: [istio-system/shared]
  http: [{route: [{destination: {host: frontend.web.svc.cluster.local}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: c-extra, namespace: web, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  hosts: [c.example.com]
  gateways: [istio-system/shared]
  http: [{match: [{uri: {prefix: /extra}}], route: [{destination: {host: reviews.shop.svc.cluster.local, port: {number: 9080}}}]}]
`})
	key := proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=sharedgateway", IPs: "10.3.0.9"}
	out := gen.Envoy(snap, key)
	gentest.ValidateAll(t, out)
	sim := envoysim.New(out.Resources)
	for _, tc := range []struct{ authority, path, vhost, cluster string }{
		{"a.example.com", "/", "a.example.com:80", "outbound|8080||frontend.web.svc.cluster.local=1"},
		{"b.example.com:80", "/extra", "a.example.com:80", "outbound|8080||frontend.web.svc.cluster.local=1"},
		{"c.example.com", "/", "c.example.com:80", "outbound|8080||frontend.web.svc.cluster.local=1"},
		{"c.example.com:80", "/extra/x", "c.example.com:80", "outbound|9080||reviews.shop.svc.cluster.local=1"},
	} {
		r := sim.Do(envoysim.Request{ListenerPort: 80, Authority: tc.authority, Path: tc.path, Method: "GET"})
		if r.Err != nil {
			t.Fatalf("%s%s: %v", tc.authority, tc.path, r.Err)
		}
		if r.VirtualHost != tc.vhost {
			t.Errorf("%s%s: virtual host %s, want %s", tc.authority, tc.path, r.VirtualHost, tc.vhost)
		}
		wantClusters(t, r, tc.cluster)
	}
	rc, _ := gentest.ByName(out, typeurl.Route, envoy.GatewayHTTPRouteName(80)).Message.(*routev3.RouteConfiguration)
	if n := len(rc.GetVirtualHosts()); n != 2 {
		t.Errorf("%d virtual hosts, want 2 (a and b share one, c has more routes)", n)
	}
}
