package envoy

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// TestGatewayListenPortNamesListenerAndRoutes: a gateway whose Service maps
// port 80 to 8080 listens on 8080, and the listener and the route
// configuration agree on the name http.8080.
func TestGatewayListenPortNamesListenerAndRoutes(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ingressgateway, namespace: istio-system}
spec:
  hosts: [ingressgateway.istio-system.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: STATIC
  endpoints: [{address: 10.3.0.1}]
`})
	key := proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.3.0.1", SDSCluster: "sds-grpc",
		Locality: mesh.ParseLocality("us-east/a")} // the golden files' ingress gateway
	out := generate(snap, key)
	if gentest.ByName(out, typeurl.Listener, OutboundListenerName("0.0.0.0", 8080)).Message == nil {
		t.Fatalf("no listener on 8080: %v", gentest.Names(out.Resources[typeurl.Listener]))
	}
	if gentest.ByName(out, typeurl.Route, GatewayHTTPRouteName(8080)).Message == nil {
		t.Fatalf("no route configuration %s: %v", GatewayHTTPRouteName(8080), gentest.Names(out.Resources[typeurl.Route]))
	}
}

const gatewayMesh = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: a-gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [demo/web.example.com]
    tls: {mode: SIMPLE, credentialName: web-cert}
  - name: secure
    port: {number: 443, name: https-m, protocol: HTTPS}
    hosts: [mtls.example.com]
    tls: {mode: MUTUAL, credentialName: m-cert, subjectAltNames: [client.example.com]}
  - port: {number: 443, name: tls-p, protocol: TLS}
    hosts: [pass.example.com]
    tls: {mode: PASSTHROUGH}
  - {port: {number: 31400, name: tcp, protocol: TCP}, hosts: ["*"]}
  - port: {number: 15443, name: tls-a, protocol: TLS}
    hosts: ["*"]
    tls: {mode: AUTO_PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: b-gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [web.example.com]
    tls: {mode: SIMPLE, credentialName: other-cert}
  - {port: {number: 31400, name: http, protocol: HTTP}, hosts: ["*"]}
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: [b.example.com]}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: other, namespace: istio-system}
spec:
  selector: {istio: egressgateway}
  servers:
  - {port: {number: 8443, name: http, protocol: HTTP}, hosts: ["*"]}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: backends, namespace: demo}
spec:
  hosts: [pass.demo.svc.cluster.local, tcp.demo.svc.cluster.local]
  ports: [{number: 9443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: pass, namespace: demo}
spec:
  hosts: [pass.example.com]
  gateways: [istio-system/a-gw]
  tls:
  - match: [{sniHosts: [pass.example.com]}]
    route: [{destination: {host: pass.demo.svc.cluster.local}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: tcp, namespace: demo}
spec:
  hosts: ["*"]
  gateways: [istio-system/a-gw]
  tcp:
  - match: [{port: 31400}]
    route:
    - {destination: {host: tcp.demo.svc.cluster.local, port: {number: 9443}}, weight: 60}
    - {destination: {host: pass.demo.svc.cluster.local}, weight: 40}
`

func TestGatewayListeners(t *testing.T) {
	ls, problems := listeners(t, gatewayMesh, ldsRouterKey)
	want := []string{"0.0.0.0_31400", "0.0.0.0_443", "0.0.0.0_80"}
	if got := ldsNames(ls); !slices.Equal(got, want) {
		t.Fatalf("listeners %v, want %v (8443 belongs to a gateway of other proxies; 15443 is AUTO_PASSTHROUGH and there is no mesh service)", got, want)
	}
	for _, l := range ls {
		if !l.GetBindToPort().GetValue() {
			t.Errorf("%s does not bind its port", l.Name)
		}
	}

	t.Run("http", func(t *testing.T) {
		l := ls["0.0.0.0_80"]
		if len(l.FilterChains) != 1 {
			t.Fatalf("%d chains: servers on one port share one route config", len(l.FilterChains))
		}
		route, hcm := rdsName(t, l.FilterChains[0])
		if route != GatewayHTTPRouteName(80) || !hcm.GetUseRemoteAddress().GetValue() {
			t.Errorf("rds %q use_remote_address %v", route, hcm.UseRemoteAddress)
		}
		if len(l.ListenerFilters) != 0 {
			t.Errorf("plain HTTP listener has listener filters %v", l.ListenerFilters)
		}
	})

	t.Run("tcp", func(t *testing.T) {
		l := ls["0.0.0.0_31400"]
		if len(l.FilterChains) != 1 {
			t.Fatalf("%d chains", len(l.FilterChains))
		}
		want := "outbound|9443||tcp.demo.svc.cluster.local*60,outbound|9443||pass.demo.svc.cluster.local*40"
		if got := tcpDests(t, l.FilterChains[0]); got != want {
			t.Errorf("tcp_proxy %s, want %s", got, want)
		}
	})

	t.Run("tls", func(t *testing.T) {
		l := ls["0.0.0.0_443"]
		if len(l.ListenerFilters) != 1 || l.ListenerFilters[0].Name != TLSInspectorFilter {
			t.Errorf("listener filters %v, want tls_inspector", l.ListenerFilters)
		}
		bySNI := map[string]*listenerv3.FilterChain{}
		for _, fc := range l.FilterChains {
			bySNI[strings.Join(fc.FilterChainMatch.GetServerNames(), " ")] = fc
		}
		if len(bySNI) != 3 {
			t.Fatalf("chains for %v, want web, mtls, pass", slices.Sorted(func(yield func(string) bool) {
				for k := range bySNI {
					if !yield(k) {
						return
					}
				}
			}))
		}
		for _, tc := range []struct {
			sni, route, cert, ca string
			mutual               bool
		}{
			{"web.example.com", "https.443.1.a-gw.istio-system", "web-cert", "", false},
			{"mtls.example.com", "https.443.secure.a-gw.istio-system", "m-cert", "m-cert-cacert", true},
		} {
			fc := bySNI[tc.sni]
			if fc == nil {
				t.Fatalf("no chain for %s", tc.sni)
			}
			if route, _ := rdsName(t, fc); route != tc.route {
				t.Errorf("%s: rds %s, want %s", tc.sni, route, tc.route)
			}
			dtc := unpack[*tlsv3.DownstreamTlsContext](t, fc.TransportSocket.GetTypedConfig())
			sds := dtc.CommonTlsContext.GetTlsCertificateSdsSecretConfigs()
			if len(sds) != 1 || sds[0].Name != tc.cert || sdsCluster(sds[0]) != "sds-grpc" {
				t.Errorf("%s: certificate %v, want SDS %s from the gateway's agent (sds-grpc), never the hub", tc.sni, sds, tc.cert)
			}
			if dtc.GetRequireClientCertificate().GetValue() != tc.mutual {
				t.Errorf("%s: require client certificate %v", tc.sni, dtc.RequireClientCertificate)
			}
			cv := dtc.CommonTlsContext.GetCombinedValidationContext()
			if got := cv.GetValidationContextSdsSecretConfig(); got.GetName() != tc.ca || (tc.ca != "" && sdsCluster(got) != "sds-grpc") {
				t.Errorf("%s: client CA %v, want %q from the gateway's agent", tc.sni, got, tc.ca)
			}
			if tc.mutual && len(cv.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()) == 0 {
				t.Errorf("%s: subjectAltNames not enforced", tc.sni)
			}
		}
		if got := tcpDests(t, bySNI["pass.example.com"]); got != "outbound|9443||pass.demo.svc.cluster.local" {
			t.Errorf("passthrough to %s", got)
		}
		if bySNI["pass.example.com"].TransportSocket != nil {
			t.Error("passthrough chain terminates TLS")
		}
	})

	for _, p := range []struct{ resource, reason string }{
		{"Gateway istio-system/b-gw", "server name web.example.com on port 443 is already served by c1:Gateway istio-system/a-gw"},
		{"Gateway istio-system/b-gw", "port 31400 already serves TCP"},
	} {
		if !ldsHasProblem(problems, p.resource, p.reason) {
			t.Errorf("no problem %q for %s in %v", p.reason, p.resource, problems)
		}
	}
}

// sdsCluster is the bootstrap cluster an SDS secret config names, "" for
// any other source (ADS).
func sdsCluster(c *tlsv3.SdsSecretConfig) string {
	gs := c.GetSdsConfig().GetApiConfigSource().GetGrpcServices()
	if len(gs) != 1 {
		return ""
	}
	return gs[0].GetEnvoyGrpc().GetClusterName()
}

// TestGatewayCredentialNameNeedsAnAgent: a gateway without an agent (no
// SDS_CLUSTER: navectl bootstrap --kind gateway) cannot be served a
// credentialName — the hub never holds a gateway's keys — so such a server
// is reported and skipped, while one with files is served.
func TestGatewayCredentialNameNeedsAnAgent(t *testing.T) {
	y := `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [web.example.com]
    tls: {mode: SIMPLE, credentialName: web-cert}
  - port: {number: 8443, name: https-files, protocol: HTTPS}
    hosts: [files.example.com]
    tls: {mode: SIMPLE, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem}
  - port: {number: 9443, name: https-ca, protocol: HTTPS}
    hosts: [ca.example.com]
    tls: {mode: MUTUAL, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, caCertCredentialName: client-ca}
`
	key := ldsRouterKey
	key.SDSCluster = ""
	ls, problems := listeners(t, y, key)
	if got := ldsNames(ls); !slices.Equal(got, []string{"0.0.0.0_8443"}) {
		t.Errorf("listeners %v, want only the server with files (0.0.0.0_8443)", got)
	}
	for _, l := range ls {
		for _, fc := range l.FilterChains {
			dtc := unpack[*tlsv3.DownstreamTlsContext](t, fc.TransportSocket.GetTypedConfig())
			if sds := dtc.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs(); len(sds) != 0 {
				t.Errorf("%s: certificate by SDS %v; want the files", l.Name, sds)
			}
		}
	}
	if !ldsHasProblem(problems, "Gateway istio-system/gw", "this gateway has no agent") {
		t.Errorf("not reported: %v", problems)
	}
}

// TestGatewayMeshTLSModes: ISTIO_MUTUAL terminates the mesh's mTLS with
// the gateway's own workload certificate from its agent's SDS, requiring a
// client certificate from the mesh roots (the server's subjectAltNames,
// else the trust domain); OPTIONAL_MUTUAL validates a client certificate
// without requiring one.
func TestGatewayMeshTLSModes(t *testing.T) {
	y := `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [internal.example.com]
    tls: {mode: ISTIO_MUTUAL}
  - port: {number: 443, name: https-opt, protocol: HTTPS}
    hosts: [partner.example.com]
    tls: {mode: OPTIONAL_MUTUAL, credentialName: partner-cert, subjectAltNames: [spiffe://partner.example/client]}
  - port: {number: 9443, name: tls, protocol: TLS}
    hosts: [db.example.com]
    tls: {mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/shop/sa/app]}
  - port: {number: 9444, name: tls-opt, protocol: TLS}
    hosts: [files.example.com]
    tls: {mode: OPTIONAL_MUTUAL}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.demo.svc.cluster.local]
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.example.com, files.example.com]
  gateways: [istio-system/gw]
  tcp: [{route: [{destination: {host: db.demo.svc.cluster.local}}]}]
`
	key := ldsRouterKey
	key.SDSCluster = "sds-grpc"
	ls, problems := listeners(t, y, key)
	chain := func(port uint32, sni string) (*listenerv3.FilterChain, *tlsv3.DownstreamTlsContext) {
		t.Helper()
		l := ls[OutboundListenerName("0.0.0.0", port)]
		for _, fc := range l.GetFilterChains() {
			if slices.Equal(fc.GetFilterChainMatch().GetServerNames(), []string{sni}) {
				return fc, unpack[*tlsv3.DownstreamTlsContext](t, fc.GetTransportSocket().GetTypedConfig())
			}
		}
		t.Fatalf("no chain for %s on %d (listeners %v, problems %v)", sni, port, ldsNames(ls), problems)
		return nil, nil
	}
	sans := func(ctx *tlsv3.CommonTlsContext) []string {
		var out []string
		for _, m := range ctx.GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames() {
			out = append(out, m.GetSanType().String()+":"+m.GetMatcher().GetExact()+m.GetMatcher().GetPrefix())
		}
		return out
	}

	t.Run("ISTIO_MUTUAL HTTPS", func(t *testing.T) {
		fc, dtc := chain(443, "internal.example.com")
		ctx := dtc.GetCommonTlsContext()
		cert := ctx.GetTlsCertificateSdsSecretConfigs()
		if len(cert) != 1 || cert[0].GetName() != "default" || cert[0].GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc" {
			t.Errorf("certificate %v, want the workload certificate from the agent's SDS", cert)
		}
		if ca := ctx.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); ca.GetName() != "ROOTCA" || ca.GetSdsConfig().GetApiConfigSource() == nil {
			t.Errorf("client CA %v, want ROOTCA from the agent's SDS", ca)
		}
		if !dtc.GetRequireClientCertificate().GetValue() {
			t.Error("client certificate not required")
		}
		if got := sans(ctx); !slices.Equal(got, []string{"URI:spiffe://cluster.local/"}) {
			t.Errorf("SANs %v, want the trust domain", got)
		}
		if !slices.Equal(ctx.GetAlpnProtocols(), []string{"h2", "http/1.1"}) {
			t.Errorf("ALPN %v", ctx.GetAlpnProtocols())
		}
		if route, _ := rdsName(t, fc); route != GatewayHTTPSRouteName(443, "0", "gw", "istio-system") {
			t.Errorf("rds %s", route)
		}
	})
	t.Run("ISTIO_MUTUAL TLS", func(t *testing.T) {
		fc, dtc := chain(9443, "db.example.com")
		ctx := dtc.GetCommonTlsContext()
		if got := sans(ctx); !slices.Equal(got, []string{"URI:spiffe://cluster.local/ns/shop/sa/app"}) {
			t.Errorf("SANs %v, want the server's subjectAltNames", got)
		}
		if !slices.Equal(ctx.GetAlpnProtocols(), []string{"istio-peer-exchange", "istio"}) || !dtc.GetRequireClientCertificate().GetValue() {
			t.Errorf("ALPN %v require %v", ctx.GetAlpnProtocols(), dtc.GetRequireClientCertificate())
		}
		if got := tcpDests(t, fc); got != "outbound|5432||db.demo.svc.cluster.local" {
			t.Errorf("tcp_proxy %s", got)
		}
	})
	t.Run("OPTIONAL_MUTUAL", func(t *testing.T) {
		_, dtc := chain(443, "partner.example.com")
		ctx := dtc.GetCommonTlsContext()
		if dtc.GetRequireClientCertificate().GetValue() {
			t.Error("client certificate required")
		}
		if ctx.GetTlsCertificateSdsSecretConfigs()[0].GetName() != "partner-cert" ||
			ctx.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "partner-cert-cacert" {
			t.Errorf("certificates %v validation %v", ctx.GetTlsCertificateSdsSecretConfigs(), ctx.GetCombinedValidationContext())
		}
		if got := sans(ctx); !slices.Equal(got, []string{"URI:spiffe://partner.example/client"}) {
			t.Errorf("SANs %v", got)
		}
	})
	t.Run("OPTIONAL_MUTUAL without certificates is reported", func(t *testing.T) {
		if ls[OutboundListenerName("0.0.0.0", 9444)] != nil {
			t.Error("a server without certificates has a listener")
		}
		if !ldsHasProblem(problems, "Gateway istio-system/gw", "a OPTIONAL_MUTUAL server needs credentialName") {
			t.Errorf("not reported: %v", problems)
		}
	})
}

// autoPassthroughMesh is an east-west gateway: AUTO_PASSTHROUGH for the
// cluster's services, a mesh service with one sidecar endpoint and one
// without and a subset, a service the hosts do not match and an external
// one.
const autoPassthroughMesh = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
  - {address: 10.1.0.1, labels: {version: v1, security.istio.io/tlsMode: istio}}
  - {address: 10.1.0.2, labels: {version: v1}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews.shop.svc.cluster.local
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other, namespace: shop}
spec:
  hosts: [other.example.com]
  location: MESH_INTERNAL
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.0.3, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: shop}
spec:
  hosts: [ext.svc.cluster.local]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
`

// TestGatewayAutoPassthrough: one chain per cluster of each matched mesh
// service, by the SNI a mesh client sends for it and the mesh ALPNs, to
// the SNI-DNAT cluster of that name: no TLS of the gateway's own, and only
// endpoints that accept mesh mTLS.
func TestGatewayAutoPassthrough(t *testing.T) {
	out := generate(gentest.Snapshot(t, map[string]string{"c1": autoPassthroughMesh}), ldsRouterKey)
	gentest.ValidateAll(t, out)
	sni := IstioMutualSNI("reviews.shop.svc.cluster.local", 9080, "")
	sniV1 := IstioMutualSNI("reviews.shop.svc.cluster.local", 9080, "v1")
	l, _ := gentest.ByName(out, typeurl.Listener, "0.0.0.0_15443").Message.(*listenerv3.Listener)
	if l == nil {
		t.Fatalf("no listener on 15443: %v, problems %v", gentest.Names(out.Resources[typeurl.Listener]), out.Problems)
	}
	validateDeep(t, l)
	if len(l.ListenerFilters) != 1 || l.ListenerFilters[0].Name != TLSInspectorFilter {
		t.Errorf("listener filters %v", l.ListenerFilters)
	}
	var got []string
	for _, fc := range l.FilterChains {
		m := fc.GetFilterChainMatch()
		if !slices.Equal(m.GetApplicationProtocols(), meshALPN) || fc.GetTransportSocket() != nil {
			t.Errorf("chain %v: ALPN %v, transport socket %v", m.GetServerNames(), m.GetApplicationProtocols(), fc.GetTransportSocket())
		}
		got = append(got, strings.Join(m.GetServerNames(), ",")+">"+tcpDests(t, fc))
	}
	if want := []string{sni + ">" + sni, sniV1 + ">" + sniV1}; !slices.Equal(got, want) {
		t.Errorf("chains %v, want %v (not other.example.com, not the external service)", got, want)
	}
	for _, name := range []string{sni, sniV1} {
		c, _ := gentest.ByName(out, typeurl.Cluster, name).Message.(*clusterv3.Cluster)
		if c == nil {
			t.Fatalf("no cluster %s: %v", name, gentest.Names(out.Resources[typeurl.Cluster]))
		}
		if c.GetTransportSocket() != nil || len(c.GetTransportSocketMatches()) != 0 || c.GetName() != name || c.GetEdsClusterConfig().GetServiceName() != "" {
			t.Errorf("%s: transport socket %v matches %v eds %v", name, c.GetTransportSocket(), c.GetTransportSocketMatches(), c.GetEdsClusterConfig())
		}
		cla, _ := gentest.ByName(out, typeurl.Endpoint, name).Message.(*endpointv3.ClusterLoadAssignment)
		var addrs []string
		for _, le := range cla.GetEndpoints() {
			for _, e := range le.GetLbEndpoints() {
				addrs = append(addrs, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		if !slices.Equal(addrs, []string{"10.1.0.1"}) {
			t.Errorf("%s endpoints %v, want only the sidecar's", name, addrs)
		}
	}
	// The ordinary cluster keeps both endpoints and its auto-mTLS.
	c, _ := gentest.ByName(out, typeurl.Cluster, "outbound|9080||reviews.shop.svc.cluster.local").Message.(*clusterv3.Cluster)
	if len(c.GetTransportSocketMatches()) == 0 {
		t.Error("the outbound cluster lost its auto-mTLS")
	}
	if gentest.ByName(out, typeurl.Cluster, IstioMutualSNI("other.example.com", 80, "")).Message != nil {
		t.Error("an SNI-DNAT cluster for a service the hosts do not match")
	}
	// Endpoint-only pushes carry the SNI-DNAT assignments too.
	v := scope.New(gentest.Snapshot(t, map[string]string{"c1": autoPassthroughMesh}), ldsRouterKey)
	if names := gentest.Names(EndpointsOf(v, map[string]bool{"reviews.shop.svc.cluster.local": true})); !slices.Contains(names, sniV1) {
		t.Errorf("EndpointsOf %v lacks %s", names, sniV1)
	}
}

func TestGatewayListensOnTargetPort(t *testing.T) {
	y := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ingressgateway, namespace: istio-system}
spec:
  hosts: [istio-ingressgateway.istio-system.svc.cluster.local]
  ports: [{number: 80, targetPort: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.9.9}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}
  - {port: {number: 81, name: http2, protocol: HTTP}, hosts: ["*"], bind: 127.0.0.1}
`
	ls, problems := listeners(t, y, ldsRouterKey)
	if got := ldsNames(ls); !slices.Equal(got, []string{"0.0.0.0_8080", "0.0.0.0_81"}) {
		t.Fatalf("listeners %v, want the service's target port 8080 for server port 80", got)
	}
	l := ls["0.0.0.0_8080"]
	if p := l.Address.GetSocketAddress().GetPortValue(); p != 8080 {
		t.Errorf("binds %d", p)
	}
	if route, _ := rdsName(t, l.FilterChains[0]); route != "http.8080" {
		t.Errorf("rds %s, want http.8080", route)
	}
	if !ldsHasProblem(problems, "Gateway istio-system/gw", "bind is not supported") {
		t.Errorf("bind not reported: %v", problems)
	}
}

func TestGatewayTerminatedTLSAndFileCertificates(t *testing.T) {
	y := `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 9443, name: tls, protocol: TLS}
    hosts: [db.example.com]
    tls: {mode: MUTUAL, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ca.pem, minProtocolVersion: TLSV1_2}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.demo.svc.cluster.local]
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.example.com]
  gateways: [istio-system/gw]
  tcp:
  - route: [{destination: {host: db.demo.svc.cluster.local}}]
`
	ls, problems := listeners(t, y, ldsRouterKey)
	l := ls["0.0.0.0_9443"]
	if l == nil || len(l.FilterChains) != 1 {
		t.Fatalf("listeners %v, problems %v", ldsNames(ls), problems)
	}
	fc := l.FilterChains[0]
	if got := fc.FilterChainMatch.GetServerNames(); !slices.Equal(got, []string{"db.example.com"}) {
		t.Errorf("server names %v", got)
	}
	if got := tcpDests(t, fc); got != "outbound|5432||db.demo.svc.cluster.local" {
		t.Errorf("tcp_proxy %s", got)
	}
	dtc := unpack[*tlsv3.DownstreamTlsContext](t, fc.TransportSocket.GetTypedConfig())
	ctx := dtc.CommonTlsContext
	if c := ctx.GetTlsCertificates(); len(c) != 1 || c[0].CertificateChain.GetFilename() != "/etc/certs/cert.pem" || c[0].PrivateKey.GetFilename() != "/etc/certs/key.pem" {
		t.Errorf("certificates %v", c)
	}
	if ca := ctx.GetValidationContext().GetTrustedCa().GetFilename(); ca != "/etc/certs/ca.pem" || !dtc.GetRequireClientCertificate().GetValue() {
		t.Errorf("client validation %v require %v", ctx.GetValidationContext(), dtc.RequireClientCertificate)
	}
	if v := ctx.GetTlsParams().GetTlsMinimumProtocolVersion(); v != tlsv3.TlsParameters_TLSv1_2 {
		t.Errorf("min TLS %v", v)
	}
	if len(ctx.AlpnProtocols) != 0 {
		t.Errorf("ALPN %v on a TLS (not HTTPS) server", ctx.AlpnProtocols)
	}
}
