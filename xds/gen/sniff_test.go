package gen

import (
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/proxy"
)

// sniffMesh has ports without a declared protocol: legacy (an address of
// its own, port 7000, a VirtualService with retries, an ALLOW policy on
// paths) and cache (no address, port 6000).
const sniffMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: legacy, namespace: shop}
spec:
  hosts: [legacy.shop.svc.cluster.local]
  addresses: [10.96.0.20]
  location: MESH_INTERNAL
  ports: [{number: 7000, name: web}]
  resolution: STATIC
  endpoints: [{address: 10.1.2.1, labels: {app: legacy, security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: cache, namespace: shop}
spec:
  hosts: [cache.shop.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 6000, name: cache}]
  resolution: STATIC
  endpoints: [{address: 10.1.3.1, labels: {app: cache}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: legacy, namespace: shop}
spec:
  hosts: [legacy.shop.svc.cluster.local]
  http:
  - route: [{destination: {host: legacy.shop.svc.cluster.local}}]
    retries: {attempts: 4, retryOn: 5xx}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: legacy, namespace: shop}
spec:
  selector: {matchLabels: {app: legacy}}
  rules: [{to: [{operation: {paths: ["/public/*"]}}]}]
`

var (
	sniffClient = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=client", IPs: "10.1.9.9"}
	sniffServer = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=legacy\nsecurity.istio.io/tlsMode=istio", IPs: "10.1.2.1"}
)

// TestSniffingGolden keeps the listeners, routes and clusters of ports
// without a declared protocol (http_inspector, an HTTP and a TCP chain,
// use_downstream_protocol clusters) in testdata/golden/.
func TestSniffingGolden(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": sniffMesh})
	for name, key := range map[string]proxy.Key{"sniff-client": sniffClient, "sniff-server": sniffServer} {
		out := Envoy(snap, key)
		gentest.ValidateDeep(t, out)
		checkGolden(t, name+".json", goldenJSON(t, out))
	}
}

// TestSniffingChoosesHTTP: on a port without a declared protocol the
// client's sidecar routes plain-text HTTP by its routes (the
// VirtualService's retries apply) and proxies anything else as TCP; the
// server's sidecar applies L7 authorization to HTTP, and Istio's rule
// for TCP (an ALLOW rule on paths allows no TCP).
func TestSniffingChoosesHTTP(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": sniffMesh})
	client := Envoy(snap, sniffClient)
	gentest.ValidateDeep(t, client)
	if len(client.Problems) > 0 {
		t.Errorf("problems: %v", client.Problems)
	}
	sim := envoysim.New(client.Resources)
	legacy := build.ClusterName("legacy.shop.svc.cluster.local", 7000, "")

	http := sim.Do(envoysim.Request{IP: "10.96.0.20", Port: 7000, Authority: "legacy.shop.svc.cluster.local:7000", Method: "GET", Path: "/x"})
	if http.Err != nil || http.Listener != "10.96.0.20_7000" || http.RouteConfig != "legacy.shop.svc.cluster.local:7000" ||
		len(http.Clusters) != 1 || http.Clusters[0].Name != legacy || http.Retry.GetNumRetries().GetValue() != 4 {
		t.Errorf("HTTP to an undeclared port: %+v; want the HTTP chain, route legacy.shop.svc.cluster.local:7000 to %s with 4 retries", http, legacy)
	}
	h2c := sim.Do(envoysim.Request{IP: "10.96.0.20", Port: 7000, Authority: "legacy.shop.svc.cluster.local:7000", Method: "POST", Path: "/svc/M", H2C: true})
	if h2c.Err != nil || h2c.RouteConfig != "legacy.shop.svc.cluster.local:7000" {
		t.Errorf("h2c to an undeclared port: %+v; want the HTTP chain", h2c)
	}
	if c := h2c.Clusters[0].Cluster; c.GetTypedExtensionProtocolOptions()[httpProtocolOptions] == nil {
		t.Errorf("cluster %s has no protocol options; want use_downstream_protocol_config (h2c stays HTTP/2)", c.GetName())
	}
	tcp := sim.Do(envoysim.Request{IP: "10.96.0.20", Port: 7000})
	if tcp.Err != nil || tcp.Chain != "10.96.0.20_7000_tcp" || len(tcp.TCP) != 1 || tcp.TCP[0].Name != legacy {
		t.Errorf("TCP to an undeclared port: %+v; want the TCP chain to %s", tcp, legacy)
	}
	tlsConn := sim.Do(envoysim.Request{IP: "10.96.0.20", Port: 7000, SNI: "legacy.example", ALPN: []string{"http/1.1"}})
	if tlsConn.Chain != "10.96.0.20_7000_tcp" {
		t.Errorf("the application's own TLS (ALPN http/1.1) took chain %q; want TCP", tlsConn.Chain)
	}
	cache := sim.Do(envoysim.Request{IP: "10.1.3.1", Port: 6000, Authority: "cache.shop.svc.cluster.local:6000", Method: "GET", Path: "/"})
	if cache.Err != nil || cache.Listener != "0.0.0.0_6000" || cache.RouteConfig != "6000" || cache.Clusters[0].Name != build.ClusterName("cache.shop.svc.cluster.local", 6000, "") {
		t.Errorf("HTTP to an undeclared port of a service without an address: %+v", cache)
	}

	server := Envoy(snap, sniffServer)
	gentest.ValidateDeep(t, server)
	in := envoysim.New(server.Resources)
	get := func(path string) envoysim.Request {
		return envoysim.Request{Inbound: true, IP: "10.1.2.1", Port: 7000, Authority: "legacy:7000", Method: "GET", Path: path, SourceIP: "10.1.9.9"}
	}
	mtls := func(r envoysim.Request, alpn string) envoysim.Request {
		r.PeerCert, r.ALPN = "spiffe://cluster.local/ns/shop/sa/client", []string{alpn}
		return r
	}
	for _, tc := range []struct {
		name   string
		req    envoysim.Request
		denied bool
	}{
		{"plain-text HTTP on an allowed path", get("/public/a"), false},
		{"plain-text HTTP elsewhere", get("/admin"), true},
		{"Istio's sidecar's mTLS HTTP (ALPN istio-http/1.1) on an allowed path", mtls(get("/public/a"), "istio-http/1.1"), false},
		{"Istio's sidecar's mTLS HTTP elsewhere", mtls(get("/admin"), "istio-http/1.1"), true},
		{"plain-text TCP: an ALLOW rule on paths allows none", envoysim.Request{Inbound: true, IP: "10.1.2.1", Port: 7000, SourceIP: "10.1.9.9"}, true},
	} {
		res := in.Do(tc.req)
		if res.Err != nil || (res.Denied != "") != tc.denied {
			t.Errorf("%s: chain %s, denied %q, err %v; want denied %v", tc.name, res.Chain, res.Denied, res.Err, tc.denied)
		}
	}
	if res := in.Do(get("/public/a")); res.Chain != build.InboundClusterName(7000)+"http" {
		t.Errorf("plain-text HTTP took chain %q; want the sniffed HTTP chain", res.Chain)
	}
}

// httpProtocolOptions is Envoy's key for a cluster's upstream HTTP
// protocol options.
const httpProtocolOptions = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// TestSniffingUnderEachMTLSMode: the inbound chains of an undeclared port
// under STRICT and DISABLE pick HTTP and TCP as under PERMISSIVE.
func TestSniffingUnderEachMTLSMode(t *testing.T) {
	get := envoysim.Request{Inbound: true, IP: "10.1.2.1", Port: 7000, Authority: "legacy:7000", Method: "GET", Path: "/public/a", SourceIP: "10.1.9.9"}
	mtls := func(r envoysim.Request, alpn string) envoysim.Request {
		r.PeerCert, r.ALPN = "spiffe://cluster.local/ns/shop/sa/client", []string{alpn}
		return r
	}
	inbound := build.InboundClusterName(7000)
	for _, tc := range []struct {
		mode      string
		req       envoysim.Request
		chain     string
		denied    bool
		terminate bool
	}{
		{"STRICT", mtls(get, "istio-http/1.1"), inbound + "mtls_http", false, true},
		{"STRICT", mtls(get, "istio"), inbound + "mtls", true, true}, // TCP: the ALLOW rule on paths allows none
		{"STRICT", get, inbound, true, false},                        // plain text fails the handshake
		{"DISABLE", get, inbound + "http", false, false},
		{"DISABLE", envoysim.Request{Inbound: true, IP: "10.1.2.1", Port: 7000, SourceIP: "10.1.9.9"}, inbound, true, false},
	} {
		pa := "---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: shop}\nspec: {mtls: {mode: " + tc.mode + "}}\n"
		out := Envoy(gentest.Snapshot(t, map[string]string{"c1": sniffMesh + pa}), sniffServer)
		gentest.ValidateDeep(t, out)
		res := envoysim.New(out.Resources).Do(tc.req)
		if res.Chain != tc.chain || (res.Denied != "") != tc.denied || res.TLSTerminated != tc.terminate {
			t.Errorf("%s, ALPN %v: chain %q, denied %q, TLS terminated %v; want chain %q, denied %v", tc.mode, tc.req.ALPN, res.Chain, res.Denied, res.TLSTerminated, tc.chain, tc.denied)
		}
	}
}

// TestSniffingDetectionTimeout: MeshConfig protocolDetectionTimeout bounds
// the wait for the client's first bytes on sniffing listeners (then TCP).
func TestSniffingDetectionTimeout(t *testing.T) {
	snap := meshSnapshot(t, "protocolDetectionTimeout: 150ms", sniffMesh)
	for _, key := range []proxy.Key{sniffClient, sniffServer} {
		out := Envoy(snap, key)
		name := "10.96.0.20_7000"
		if key == sniffServer {
			name = "virtualInbound"
		}
		l, _ := gentest.ByName(out, typeurl.Listener, name).Message.(*listenerv3.Listener)
		if l.GetListenerFiltersTimeout().AsDuration() != 150*time.Millisecond || !l.GetContinueOnListenerFiltersTimeout() {
			t.Errorf("%s: listener filters timeout %v (continue %v); want 150ms, then continue", name, l.GetListenerFiltersTimeout(), l.GetContinueOnListenerFiltersTimeout())
		}
	}
}
