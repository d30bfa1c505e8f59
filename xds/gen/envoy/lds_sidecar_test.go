package envoy

import (
	"slices"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/proxy"
)

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
