package envoy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

var ldsSidecarKey = proxy.Key{Type: proxy.Sidecar, Mesh: "default", Namespace: "demo", Labels: "app=x", IPs: "10.0.0.1"}

var ldsRouterKey = proxy.Key{Type: proxy.Router, Mesh: "default", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.0.9.9"}

// ldsMesh has a service of every outbound kind, the proxy's own workload
// (10.0.0.1 behind web and db) and conflicting port uses.
const ldsMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: web, namespace: demo}
spec:
  hosts: [web.demo.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: x}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: x1, namespace: demo}
spec: {address: 10.0.0.1, ports: {http: 18080}, labels: {app: x}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.demo.svc.cluster.local]
  addresses: [240.0.0.10]
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1, labels: {version: v1}}, {address: 10.0.0.2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: demo}
spec:
  host: db.demo.svc.cluster.local
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.demo.svc.cluster.local]
  tcp:
  - match: [{sourceLabels: {app: other}}]
    route: [{destination: {host: db.demo.svc.cluster.local, subset: v2}}]
  - match: [{port: 5432}]
    route:
    - {destination: {host: db.demo.svc.cluster.local, subset: v1}, weight: 80}
    - {destination: {host: db.demo.svc.cluster.local, subset: v2}, weight: 20}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: cache, namespace: demo}
spec:
  hosts: [cache.demo.svc.cluster.local]
  ports: [{number: 6379, name: redis, protocol: REDIS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: legacy, namespace: demo}
spec:
  hosts: [legacy.demo.svc.cluster.local]
  ports: [{number: 8080, name: tcp, protocol: TCP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a9000, namespace: demo}
spec:
  hosts: [a9000.demo.svc.cluster.local]
  ports: [{number: 9000, name: tcp, protocol: TCP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: b9000, namespace: demo}
spec:
  hosts: [b9000.demo.svc.cluster.local]
  ports: [{number: 9000, name: tcp, protocol: TCP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: demo}
spec:
  hosts: [api.example.com, other.example.com]
  location: MESH_EXTERNAL
  ports: [{number: 443, name: https, protocol: HTTPS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: demo}
spec:
  hosts: [api.example.com]
  tls:
  - match: [{sniHosts: [api.example.com]}]
    route: [{destination: {host: other.example.com}}]
`

func listeners(t *testing.T, yaml string, key proxy.Key) (map[string]*listenerv3.Listener, []mesh.Problem) {
	t.Helper()
	out := generate(gentest.Snapshot(t, map[string]string{"c1": yaml}), key)
	ls := map[string]*listenerv3.Listener{}
	for _, r := range out.Resources[typeurl.Listener] {
		l := r.Message.(*listenerv3.Listener)
		if r.Name != l.Name {
			t.Errorf("resource %q holds listener %q", r.Name, l.Name)
		}
		if _, dup := ls[r.Name]; dup {
			t.Errorf("listener %s generated twice", r.Name)
		}
		validateDeep(t, l)
		ls[r.Name] = l
	}
	return ls, out.Problems
}

// validateDeep runs ValidateAll on the listener and on every typed config
// inside it (ValidateAll does not look into Any).
func validateDeep(t *testing.T, l *listenerv3.Listener) {
	t.Helper()
	if err := l.ValidateAll(); err != nil {
		t.Errorf("listener %s: %v", l.Name, err)
	}
	check := func(a *anypb.Any) {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("listener %s: %v", l.Name, err)
		}
		if err := m.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
			t.Errorf("listener %s: %s: %v", l.Name, a.TypeUrl, err)
		}
		if hcm, ok := m.(*hcmv3.HttpConnectionManager); ok {
			for _, f := range hcm.HttpFilters {
				if err := f.ValidateAll(); err != nil {
					t.Errorf("listener %s: http filter %s: %v", l.Name, f.Name, err)
				}
			}
		}
	}
	for _, lf := range l.ListenerFilters {
		check(lf.GetTypedConfig())
	}
	for _, fc := range chains(l) {
		for _, f := range fc.Filters {
			check(f.GetTypedConfig())
		}
		if ts := fc.TransportSocket; ts != nil {
			check(ts.GetTypedConfig())
		}
	}
}

func chains(l *listenerv3.Listener) []*listenerv3.FilterChain {
	out := slices.Clone(l.FilterChains)
	if l.DefaultFilterChain != nil {
		out = append(out, l.DefaultFilterChain)
	}
	return out
}

func unpack[T proto.Message](t *testing.T, a *anypb.Any) T {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.(T)
	if !ok {
		t.Fatalf("typed config is %s", a.TypeUrl)
	}
	return v
}

// only returns the single filter of a chain.
func only(t *testing.T, fc *listenerv3.FilterChain) *listenerv3.Filter {
	t.Helper()
	if fc == nil || len(fc.Filters) != 1 {
		t.Fatalf("chain %v: want exactly one filter", fc)
	}
	return fc.Filters[0]
}

// tcpDests renders a chain's tcp_proxy destinations as "cluster" or
// "cluster*weight,...".
func tcpDests(t *testing.T, fc *listenerv3.FilterChain) string {
	t.Helper()
	f := only(t, fc)
	if f.Name != TCPProxyFilter {
		t.Fatalf("filter %s, want tcp_proxy", f.Name)
	}
	tp := unpack[*tcpproxyv3.TcpProxy](t, f.GetTypedConfig())
	if c := tp.GetCluster(); c != "" {
		return c
	}
	var parts []string
	for _, c := range tp.GetWeightedClusters().GetClusters() {
		parts = append(parts, c.Name+"*"+portString(c.Weight))
	}
	return strings.Join(parts, ",")
}

func rdsName(t *testing.T, fc *listenerv3.FilterChain) (string, *hcmv3.HttpConnectionManager) {
	t.Helper()
	f := only(t, fc)
	if f.Name != build.HTTPConnectionManagerFilter {
		t.Fatalf("filter %s, want HCM", f.Name)
	}
	hcm := unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
	return hcm.GetRds().GetRouteConfigName(), hcm
}

func ldsNames(ls map[string]*listenerv3.Listener) []string {
	var out []string
	for n := range ls {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func ldsHasProblem(ps []mesh.Problem, resource, reason string) bool {
	for _, p := range ps {
		if strings.Contains(p.Resource, resource) && strings.Contains(p.Reason, reason) {
			return true
		}
	}
	return false
}

func TestSidecarOutboundListeners(t *testing.T) {
	ls, problems := listeners(t, ldsMesh, ldsSidecarKey)
	want := []string{"0.0.0.0_443", "0.0.0.0_6379", "0.0.0.0_8080", "0.0.0.0_9000", "240.0.0.10_5432", VirtualInboundListener, VirtualOutboundListener}
	if got := ldsNames(ls); !slices.Equal(got, want) {
		t.Fatalf("listeners %v, want %v", got, want)
	}
	for _, n := range want[:5] {
		if ls[n].GetBindToPort().GetValue() {
			t.Errorf("%s binds its port; outbound listeners get traffic from virtualOutbound", n)
		}
	}

	t.Run("http", func(t *testing.T) {
		l := ls["0.0.0.0_8080"]
		if len(l.FilterChains) != 1 {
			t.Fatalf("%d chains", len(l.FilterChains))
		}
		route, hcm := rdsName(t, l.FilterChains[0])
		if route != "8080" || hcm.GetRds().GetConfigSource().GetAds() == nil {
			t.Errorf("rds %q over %v, want 8080 over ADS", route, hcm.GetRds().GetConfigSource())
		}
		var fs []string
		for _, f := range hcm.HttpFilters {
			fs = append(fs, f.Name)
		}
		if !slices.Equal(fs, []string{build.FaultFilter, build.CorsFilter, build.RouterFilter}) {
			t.Errorf("http filters %v", fs)
		}
		if hcm.CodecType != hcmv3.HttpConnectionManager_AUTO || hcm.StatPrefix != "outbound_0.0.0.0_8080" {
			t.Errorf("codec %v stat prefix %q", hcm.CodecType, hcm.StatPrefix)
		}
	})

	tcp := []struct{ listener, want string }{
		// sourceLabels app=other does not match app=x; the port match does.
		{"240.0.0.10_5432", "outbound|5432|v1|db.demo.svc.cluster.local*80,outbound|5432|v2|db.demo.svc.cluster.local*20"},
		{"0.0.0.0_6379", "outbound|6379||cache.demo.svc.cluster.local"},
		{"0.0.0.0_9000", "outbound|9000||a9000.demo.svc.cluster.local"},
	}
	for _, tc := range tcp {
		t.Run(tc.listener, func(t *testing.T) {
			l := ls[tc.listener]
			if len(l.FilterChains) != 1 || l.FilterChains[0].FilterChainMatch != nil {
				t.Fatalf("want one unconditional chain: %v", l.FilterChains)
			}
			if got := tcpDests(t, l.FilterChains[0]); got != tc.want {
				t.Errorf("tcp_proxy %s, want %s", got, tc.want)
			}
		})
	}
	if a := ls["240.0.0.10_5432"].Address.GetSocketAddress(); a.Address != "240.0.0.10" || a.GetPortValue() != 5432 {
		t.Errorf("VIP listener address %v", a)
	}

	t.Run("tls", func(t *testing.T) {
		l := ls["0.0.0.0_443"]
		if len(l.ListenerFilters) != 1 || l.ListenerFilters[0].Name != TLSInspectorFilter {
			t.Errorf("listener filters %v, want tls_inspector", l.ListenerFilters)
		}
		got := map[string]string{}
		for _, fc := range l.FilterChains {
			got[strings.Join(fc.FilterChainMatch.GetServerNames(), " ")] = tcpDests(t, fc)
		}
		want := map[string]string{
			// the VirtualService sends api.example.com SNI to other.example.com
			"api.example.com":   "outbound|443||other.example.com",
			"other.example.com": "outbound|443||other.example.com",
		}
		if len(got) != len(want) || got["api.example.com"] != want["api.example.com"] || got["other.example.com"] != want["other.example.com"] {
			t.Errorf("chains %v, want %v", got, want)
		}
		if d := tcpDests(t, l.DefaultFilterChain); d != build.PassthroughCluster {
			t.Errorf("unknown SNI goes to %s", d)
		}
	})

	for _, p := range []struct{ resource, reason string }{
		{"ServiceEntry demo/legacy", "legacy.demo.svc.cluster.local port 8080"},
		{"ServiceEntry demo/b9000", "a9000.demo.svc.cluster.local takes 0.0.0.0:9000"},
	} {
		if !ldsHasProblem(problems, p.resource, p.reason) {
			t.Errorf("no problem %q for %s in %v", p.reason, p.resource, problems)
		}
	}
	if ldsHasProblem(problems, "a9000", "") {
		t.Errorf("the winner a9000 is reported: %v", problems)
	}
}

func TestVirtualOutboundDefault(t *testing.T) {
	registryOnly := `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: demo}
spec:
  egress: [{hosts: ["*/*"]}]
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
`
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"allow any (default)", ldsMesh, build.PassthroughCluster},
		{"registry only", ldsMesh + "---\n" + registryOnly, build.BlackHoleCluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, _ := listeners(t, tc.yaml, ldsSidecarKey)
			l := ls[VirtualOutboundListener]
			if l == nil {
				t.Fatal("no virtualOutbound")
			}
			if !l.GetUseOriginalDst().GetValue() || !l.GetBindToPort().GetValue() || l.Address.GetSocketAddress().GetPortValue() != VirtualOutboundPort {
				t.Errorf("virtualOutbound: use_original_dst %v bind %v address %v", l.UseOriginalDst, l.BindToPort, l.Address)
			}
			if got := tcpDests(t, l.DefaultFilterChain); got != tc.want {
				t.Errorf("default chain to %s, want %s", got, tc.want)
			}
			if got := tcpDests(t, ls["0.0.0.0_443"].DefaultFilterChain); got != tc.want {
				t.Errorf("unknown SNI to %s, want %s", got, tc.want)
			}
		})
	}
}

// meshMTLS is a mesh-wide PeerAuthentication (a YAML document to append).
func meshMTLS(mode string) string {
	return "\n---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\nspec: {mtls: {mode: " + mode + "}}\n"
}

func TestVirtualInbound(t *testing.T) {
	ingress := `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: x, namespace: demo}
spec:
  workloadSelector: {labels: {app: x}}
  ingress:
  - {port: {number: 9090, protocol: HTTP, name: http}, defaultEndpoint: 127.0.0.1:8080}
  - {port: {number: 9091, protocol: TCP, name: tcp}, defaultEndpoint: 127.0.0.1:8081}
`
	type chain struct {
		port uint32
		http bool
	}
	for _, tc := range []struct {
		name string
		yaml string
		key  proxy.Key
		want []chain
	}{
		// 10.0.0.1 serves web (8080 -> workload port 18080) and db (5432).
		// mTLS is off mesh-wide: one plain-text chain per port (the mTLS
		// layouts are TestInboundMTLSChains').
		{"workload ports", ldsMesh + meshMTLS("DISABLE"), ldsSidecarKey, []chain{{5432, false}, {18080, true}}},
		{"no workload", ldsMesh + meshMTLS("DISABLE"), proxy.Key{Type: proxy.Sidecar, Mesh: "default", Namespace: "demo", IPs: "10.9.9.9"}, nil},
		{"sidecar ingress overrides", ldsMesh + "---\n" + ingress + meshMTLS("DISABLE"), ldsSidecarKey, []chain{{9090, true}, {9091, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, _ := listeners(t, tc.yaml, tc.key)
			l := ls[VirtualInboundListener]
			if l == nil {
				t.Fatal("no virtualInbound")
			}
			if l.Address.GetSocketAddress().GetPortValue() != VirtualInboundPort || !l.GetBindToPort().GetValue() {
				t.Errorf("address %v bind %v", l.Address, l.BindToPort)
			}
			if len(l.ListenerFilters) != 1 || l.ListenerFilters[0].Name != OriginalDstFilter {
				t.Errorf("listener filters %v, want original_dst only", l.ListenerFilters)
			}
			var got []chain
			for _, fc := range l.FilterChains {
				port := fc.FilterChainMatch.GetDestinationPort().GetValue()
				cluster := build.InboundClusterName(port)
				f := only(t, fc)
				c := chain{port: port, http: f.Name == build.HTTPConnectionManagerFilter}
				if c.http {
					hcm := unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
					vh := hcm.GetRouteConfig().GetVirtualHosts()
					if len(vh) != 1 || !slices.Equal(vh[0].Domains, []string{"*"}) || vh[0].Routes[0].GetRoute().GetCluster() != cluster {
						t.Errorf("port %d: inline routes %v, want * -> %s", port, vh, cluster)
					}
					if n := len(hcm.HttpFilters); n != 1 || hcm.HttpFilters[0].Name != build.RouterFilter {
						t.Errorf("port %d: inbound http filters %v", port, hcm.HttpFilters)
					}
				} else if d := tcpDests(t, fc); d != cluster {
					t.Errorf("port %d: tcp_proxy to %s, want %s", port, d, cluster)
				}
				got = append(got, c)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("chains %v, want %v", got, tc.want)
			}
			if d := tcpDests(t, l.DefaultFilterChain); d != build.InboundPassthroughCluster {
				t.Errorf("fallthrough to %s", d)
			}
		})
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
			if len(sds) != 1 || sds[0].Name != tc.cert || sds[0].SdsConfig.GetAds() == nil {
				t.Errorf("%s: certificate %v, want SDS %s over ADS", tc.sni, sds, tc.cert)
			}
			if dtc.GetRequireClientCertificate().GetValue() != tc.mutual {
				t.Errorf("%s: require client certificate %v", tc.sni, dtc.RequireClientCertificate)
			}
			cv := dtc.CommonTlsContext.GetCombinedValidationContext()
			if got := cv.GetValidationContextSdsSecretConfig().GetName(); got != tc.ca {
				t.Errorf("%s: client CA %q, want %q", tc.sni, got, tc.ca)
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

func TestListenersDeterministic(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		key  proxy.Key
	}{{ldsMesh, ldsSidecarKey}, {gatewayMesh, ldsRouterKey}} {
		s := gentest.Snapshot(t, map[string]string{"c1": tc.yaml})
		first := generate(s, tc.key)
		for range 5 {
			again := generate(s, tc.key)
			a, b := first.Resources[typeurl.Listener], again.Resources[typeurl.Listener]
			if len(a) != len(b) {
				t.Fatalf("%d then %d listeners", len(a), len(b))
			}
			for i := range a {
				ma, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a[i].Message)
				mb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(b[i].Message)
				if a[i].Name != b[i].Name || string(ma) != string(mb) {
					t.Fatalf("listener %s differs between runs", a[i].Name)
				}
			}
			if !slices.Equal(first.Problems, again.Problems) {
				t.Fatalf("problems differ: %v vs %v", first.Problems, again.Problems)
			}
		}
	}
}

func TestProxylessGetsNoEnvoyListeners(t *testing.T) {
	ls, _ := listeners(t, ldsMesh, proxy.Key{Type: proxy.GRPC, Mesh: "default", Namespace: "demo"})
	if len(ls) != 0 {
		t.Errorf("listeners %v", ldsNames(ls))
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

// ldsBenchConfig is n services: half HTTP on one of 5 ports, a quarter TCP
// with a VIP and a tcp route split, a quarter TLS on 443.
func ldsBenchConfig(tb testing.TB, n int) *mesh.Snapshot {
	tb.Helper()
	var b strings.Builder
	for i := range n {
		h := "svc-" + strconv.Itoa(i) + ".ns-" + strconv.Itoa(i%10) + ".svc.cluster.local"
		ns := "ns-" + strconv.Itoa(i%10)
		switch i % 4 {
		case 0, 1:
			b.WriteString("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s" + strconv.Itoa(i) + ", namespace: " + ns + "}\nspec:\n  hosts: [" + h +
				"]\n  ports: [{number: " + strconv.Itoa(8080+i%5) + ", name: http, protocol: HTTP}]\n  resolution: STATIC\n  endpoints: [{address: 10.1." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + "}]\n")
		case 2:
			b.WriteString("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s" + strconv.Itoa(i) + ", namespace: " + ns + "}\nspec:\n  hosts: [" + h +
				"]\n  addresses: [240.1." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + "]\n  ports: [{number: 5432, name: tcp, protocol: TCP}]\n  resolution: STATIC\n  endpoints: [{address: 10.1." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + "}]\n" +
				"---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: s" + strconv.Itoa(i) + ", namespace: " + ns + "}\nspec:\n  hosts: [" + h + "]\n  tcp:\n  - route:\n    - {destination: {host: " + h + "}, weight: 90}\n    - {destination: {host: " + h + ", port: {number: 5433}}, weight: 10}\n")
		case 3:
			b.WriteString("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s" + strconv.Itoa(i) + ", namespace: " + ns + "}\nspec:\n  hosts: [" + h +
				"]\n  ports: [{number: 443, name: tls, protocol: TLS}]\n  resolution: DNS\n")
		}
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), "bench.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs[0])
	}
	return mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
}

// BenchmarkSidecarListeners measures generating and marshalling one
// sidecar's listeners.
func BenchmarkSidecarListeners(b *testing.B) {
	for _, n := range []int{100, 1000} {
		s := ldsBenchConfig(b, n)
		b.Run("services="+strconv.Itoa(n), func(b *testing.B) {
			benchListeners(b, s, ldsSidecarKey)
		})
	}
}

func benchListeners(b *testing.B, s *mesh.Snapshot, key proxy.Key) {
	b.ReportAllocs()
	var kb, count int
	for b.Loop() {
		kb, count = marshalListeners(b, s, key)
	}
	b.ReportMetric(float64(kb)/1024, "kb/msg")
	b.ReportMetric(float64(count), "resources/msg")
}

// marshalListeners generates and marshals a proxy's listeners once:
// bytes and resource count.
func marshalListeners(tb testing.TB, s *mesh.Snapshot, key proxy.Key) (int, int) {
	bytes, count := 0, 0
	for _, r := range Listeners(scope.New(s, key)) {
		m, err := proto.Marshal(r.Message)
		if err != nil {
			tb.Fatal(err)
		}
		bytes += len(m)
		count++
	}
	return bytes, count
}

// TestBenchmarkSidecarListeners runs the benchmark once so it cannot rot,
// and checks its config yields what the benchmark claims to measure.
func TestBenchmarkSidecarListeners(t *testing.T) {
	s := ldsBenchConfig(t, 20)
	ls := map[string]bool{}
	for _, r := range Listeners(scope.New(s, ldsSidecarKey)) {
		ls[r.Name] = true
	}
	// 5 HTTP ports, 5 TCP VIPs, 443, virtualOutbound, virtualInbound
	if len(ls) != 13 || !ls["240.1.0.2_5432"] || !ls["0.0.0.0_443"] {
		t.Errorf("listeners %v", ls)
	}
	if _, n := marshalListeners(t, s, ldsSidecarKey); n != len(ls) {
		t.Errorf("benchmark body marshalled %d listeners, want %d", n, len(ls))
	}
}

func TestSidecarTCPRouteSelection(t *testing.T) {
	shadowed := `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-wild, namespace: demo}
spec:
  hosts: ["*.demo.svc.cluster.local"]
  tcp:
  - route: [{destination: {host: cache.demo.svc.cluster.local, port: {number: 6379}}}]
`
	other := proxy.Key{Type: proxy.Sidecar, Mesh: "default", Namespace: "demo", Labels: "app=other"}
	for _, tc := range []struct {
		name    string
		yaml    string
		key     proxy.Key
		want    string
		problem string
	}{
		{"sourceLabels match", ldsMesh, other, "outbound|5432|v2|db.demo.svc.cluster.local", ""},
		{"port match", ldsMesh, ldsSidecarKey, "outbound|5432|v1|db.demo.svc.cluster.local*80,outbound|5432|v2|db.demo.svc.cluster.local*20", ""},
		// the exact host's VirtualService wins over the wildcard one
		{"precedence", ldsMesh + "---\n" + shadowed, ldsSidecarKey, "outbound|5432|v1|db.demo.svc.cluster.local*80,outbound|5432|v2|db.demo.svc.cluster.local*20", "VirtualService demo/db takes precedence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, problems := listeners(t, tc.yaml, tc.key)
			if got := tcpDests(t, ls["240.0.0.10_5432"].FilterChains[0]); got != tc.want {
				t.Errorf("tcp_proxy %s, want %s", got, tc.want)
			}
			if tc.problem != "" && !ldsHasProblem(problems, "VirtualService demo/db-wild", tc.problem) {
				t.Errorf("no problem %q in %v", tc.problem, problems)
			}
		})
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
