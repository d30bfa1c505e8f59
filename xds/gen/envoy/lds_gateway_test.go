package envoy

import (
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/gentest"
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
	key := proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.3.0.1",
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
		t.Fatalf("listeners %v, want %v (8443 belongs to a gateway of other proxies, 15443 is AUTO_PASSTHROUGH)", got, want)
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
		{"Gateway istio-system/a-gw", "tls mode AUTO_PASSTHROUGH is not supported"},
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

func TestGatewayUnsupportedTLSModes(t *testing.T) {
	for _, mode := range []string{"ISTIO_MUTUAL", "OPTIONAL_MUTUAL", "AUTO_PASSTHROUGH"} {
		t.Run(mode, func(t *testing.T) {
			y := `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: tls, protocol: TLS}
    hosts: ["*"]
    tls: {mode: ` + mode + `}
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}
`
			ls, problems := listeners(t, y, ldsRouterKey)
			if got := ldsNames(ls); !slices.Equal(got, []string{"0.0.0.0_80"}) {
				t.Errorf("listeners %v, want only 0.0.0.0_80", got)
			}
			if !ldsHasProblem(problems, "Gateway istio-system/gw", "tls mode "+mode) {
				t.Errorf("not reported: %v", problems)
			}
		})
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
