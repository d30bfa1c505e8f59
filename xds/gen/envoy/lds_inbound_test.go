package envoy

import (
	"slices"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/proxy"
)

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
