package gentest

import (
	"slices"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	statsv1 "istio.io/api/envoy/extensions/stats"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen/build"
)

// SecurityMesh is one workload, httpbin in namespace foo at 10.0.0.5, with an
// HTTP port (service 8000 → workload 80) and a TCP port (9000), injected
// (tlsMode: istio).
const SecurityMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: httpbin, namespace: foo}
spec:
  hosts: [httpbin.foo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 8000, name: http, protocol: HTTP, targetPort: 80}, {number: 9000, name: tcp, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.5, labels: {app: httpbin, security.istio.io/tlsMode: istio}}]
`

// Decode decodes one cluster's YAML, failing t on the first error.
func Decode(t testing.TB, y string) []*meshconfig.Object {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(y), "security.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	return objs
}

// ValidateDeep runs ValidateAll on every resource and on every typed
// config inside listeners and clusters (ValidateAll does not look into
// Any): listener filters, network filters, HTTP filters, transport
// sockets and transport socket matches.
func ValidateDeep(t testing.TB, out *build.Output) {
	t.Helper()
	var check func(where string, a *anypb.Any)
	check = func(where string, a *anypb.Any) {
		if a == nil {
			return
		}
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("%s: %s: %v", where, a.TypeUrl, err)
			}
		} else if _, istio := m.(*statsv1.PluginConfig); !istio {
			// Only Istio's own filter configs (istio.io/api generates
			// no validators) may lack ValidateAll.
			t.Errorf("%s: %s has no ValidateAll", where, a.TypeUrl)
		}
		logs := func(what string, als []*accesslogv3.AccessLog) {
			for _, al := range als {
				check(where+": "+what+" access log "+al.GetName(), al.GetTypedConfig())
				check(where+": "+what+" access log filter", al.GetFilter().GetExtensionFilter().GetTypedConfig())
			}
		}
		switch c := m.(type) {
		case *hcmv3.HttpConnectionManager:
			for _, f := range c.GetHttpFilters() {
				check(where+": http filter "+f.GetName(), f.GetTypedConfig())
			}
			logs("http", c.GetAccessLog())
			check(where+": tracing", c.GetTracing().GetProvider().GetTypedConfig())
			check(where+": request id", c.GetRequestIdExtension().GetTypedConfig())
		case *tcpproxyv3.TcpProxy:
			logs("tcp", c.GetAccessLog())
		}
	}
	socket := func(where string, ts *corev3.TransportSocket) {
		if ts != nil {
			check(where+" transport socket", ts.GetTypedConfig())
		}
	}
	for typeURL, rs := range out.Resources {
		for _, r := range rs {
			if err := r.Message.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
				t.Errorf("%s %s: %v", typeURL, r.Name, err)
			}
			switch m := r.Message.(type) {
			case *listenerv3.Listener:
				for _, lf := range m.GetListenerFilters() {
					check("listener "+m.GetName(), lf.GetTypedConfig())
				}
				chains := slices.Clone(m.GetFilterChains())
				if m.GetDefaultFilterChain() != nil {
					chains = append(chains, m.GetDefaultFilterChain())
				}
				for _, fc := range chains {
					where := "listener " + m.GetName() + " chain " + fc.GetName()
					for _, f := range fc.GetFilters() {
						check(where, f.GetTypedConfig())
					}
					socket(where, fc.GetTransportSocket())
				}
			case *clusterv3.Cluster:
				socket("cluster "+m.GetName(), m.GetTransportSocket())
				for _, tm := range m.GetTransportSocketMatches() {
					socket("cluster "+m.GetName()+" match "+tm.GetName(), tm.GetTransportSocket())
				}
			}
		}
	}
}

// PeerAuthentication is namespace ns's PeerAuthentication "default"
// (namespace-wide; mesh-wide in istio-system) with mTLS mode mode.
func PeerAuthentication(ns, mode string) string {
	return "\n---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: " + ns + "}\nspec: {mtls: {mode: " + mode + "}}\n"
}

// AuthorizationPolicies: a namespace-wide DENY of /admin*, an ALLOW for httpbin
// with rules by principal + method + path, by namespace, by IP block + TCP
// port, by request header, and a mesh-wide AUDIT of DELETE.
const AuthorizationPolicies = `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-admin, namespace: foo}
spec:
  action: DENY
  rules: [{to: [{operation: {ports: ["80"], paths: ["/admin*"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: httpbin, namespace: foo}
spec:
  selector: {matchLabels: {app: httpbin}}
  rules:
  - from: [{source: {principals: [cluster.local/ns/bar/sa/sleep]}}]
    to: [{operation: {methods: [GET], paths: [/headers, "/status/*"]}}]
  - from: [{source: {namespaces: [ops]}}]
  - from: [{source: {ipBlocks: [192.168.0.0/16]}}]
    to: [{operation: {ports: ["9000"]}}]
  - when: [{key: "request.headers[x-token]", values: [open-sesame]}]
  - from: [{source: {notPrincipals: ["*"], notIpBlocks: [10.0.0.0/8]}}]
    to: [{operation: {notPaths: ["/private*"], hosts: [httpbin.foo]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit-delete, namespace: istio-system}
spec:
  action: AUDIT
  rules: [{to: [{operation: {ports: ["80"], methods: [DELETE]}}]}]
`
