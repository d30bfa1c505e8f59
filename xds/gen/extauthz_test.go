package gen

import (
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// extAuthzMesh is httpbin (gentest.SecurityMesh) with an external
// authorizer service and a CUSTOM policy sending /admin* to provider
// PROVIDER.
const extAuthzMesh = gentest.SecurityMesh + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: authz, namespace: sys}
spec:
  hosts: [authz.sys.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 9191, name: grpc, protocol: GRPC}, {number: 8181, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.9.9}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: foo}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: CUSTOM
  provider: {name: PROVIDER}
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
`

const extAuthzProviders = `
extensionProviders:
- name: grpc-authz
  envoyExtAuthzGrpc: {service: authz.sys.svc.cluster.local, port: 9191, timeout: 2s, failOpen: true}
- name: http-authz
  envoyExtAuthzHttp:
    service: sys/authz.sys.svc.cluster.local
    port: 8181
    pathPrefix: /check
    statusOnError: "503"
    includeRequestHeadersInCheck: [authorization, x-ext-*]
    includeAdditionalHeadersInCheck: {x-from: mesh}
    includeRequestBodyInCheck: {maxRequestBytes: 4096, allowPartialMessage: true}
    headersToUpstreamOnAllow: [x-user]
    headersToDownstreamOnDeny: [www-authenticate]
    headersToDownstreamOnAllow: [set-cookie]
- name: tracer
  zipkin: {service: zipkin.sys.svc.cluster.local, port: 9411}
`

var extAuthzKey = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "foo", Labels: "app=httpbin\nsecurity.istio.io/tlsMode=istio", IPs: "10.0.0.5"}

// extAuthzOut generates httpbin's sidecar with the CUSTOM policy naming
// provider (and extra YAML), validated deeply.
func extAuthzOut(t *testing.T, provider, extra string) *Output {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(strings.ReplaceAll(extAuthzMesh, "PROVIDER", provider)+extra), "c1.yaml")
	if len(errs) > 0 {
		t.Fatalf("decode: %v", errs)
	}
	b := &mesh.Builder{MeshConfig: parseMeshConfig(t, extAuthzProviders)}
	out := Envoy(b.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}}), extAuthzKey)
	gentest.ValidateDeep(t, out)
	return out
}

// TestExtAuthzGolden keeps the CUSTOM filters (shadow RBAC, ext_authz
// enabled by its metadata) for both provider kinds in testdata/golden/.
func TestExtAuthzGolden(t *testing.T) {
	for _, p := range []string{"grpc-authz", "http-authz"} {
		checkGolden(t, "extauthz-"+p+".json", goldenJSON(t, extAuthzOut(t, p, "")))
	}
}

// TestExtAuthzCalledForWhatTheRulesMatch: the CUSTOM policy's provider is
// asked about the requests its rules match, and only those; its answer
// decides; DENY and ALLOW policies still apply after it.
func TestExtAuthzCalledForWhatTheRulesMatch(t *testing.T) {
	grpcCluster := build.ClusterName("authz.sys.svc.cluster.local", 9191, "")
	httpCluster := build.ClusterName("authz.sys.svc.cluster.local", 8181, "")
	get := func(path string, deny bool) envoysim.Request {
		return envoysim.Request{Inbound: true, IP: "10.0.0.5", Port: 80, Authority: "httpbin.foo:8000", Method: "GET", Path: path,
			SourceIP: "10.1.1.1", PeerCert: "spiffe://cluster.local/ns/bar/sa/sleep", ALPN: []string{"istio"}, ExtAuthzDenies: deny}
	}
	for _, tc := range []struct {
		provider, cluster string
	}{{"grpc-authz", grpcCluster}, {"http-authz", httpCluster}} {
		out := extAuthzOut(t, tc.provider, `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-secret, namespace: foo}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin/secret"]}}]}]
`)
		if len(out.Problems) > 0 && tc.provider == "grpc-authz" {
			t.Errorf("%s: problems %v", tc.provider, out.Problems)
		}
		sim := envoysim.New(out.Resources)
		for _, c := range []struct {
			name   string
			req    envoysim.Request
			asked  bool
			denied string
		}{
			{"a matching request the authorizer allows", get("/admin/x", false), true, ""},
			{"a matching request the authorizer denies", get("/admin/x", true), true, "ext_authz"},
			{"a request the rules do not match", get("/public", true), false, ""},
			{"the authorizer first, then DENY policies", get("/admin/secret", false), true, "deny-secret"},
		} {
			res := sim.Do(c.req)
			if res.Err != nil {
				t.Errorf("%s, %s: %v", tc.provider, c.name, res.Err)
				continue
			}
			asked := len(res.ExtAuthz) == 1 && res.ExtAuthz[0] == tc.cluster
			if asked != c.asked || (c.denied == "") != (res.Denied == "") || !strings.Contains(res.Denied, c.denied) {
				t.Errorf("%s, %s: authorizers asked %v, denied %q; want %s asked %v, denied %q", tc.provider, c.name, res.ExtAuthz, res.Denied, tc.cluster, c.asked, c.denied)
			}
		}
		// TCP: the rule's paths do not apply to connections (DENY
		// semantics: left out), so a gRPC authorizer is asked about every
		// connection; an HTTP one cannot be, as in Istio.
		res := sim.Do(envoysim.Request{Inbound: true, IP: "10.0.0.5", Port: 9000, SourceIP: "10.1.1.1", PeerCert: "spiffe://cluster.local/ns/bar/sa/sleep", ALPN: []string{"istio"}})
		if wantAsked := tc.provider == "grpc-authz"; res.Err != nil || (len(res.ExtAuthz) == 1) != wantAsked {
			t.Errorf("%s, TCP connection: authorizers asked %v (err %v); want asked %v", tc.provider, res.ExtAuthz, res.Err, wantAsked)
		}
	}
}

// TestExtAuthzProviderSettings: the provider's settings reach the
// ext_authz filter as Istio sets them.
func TestExtAuthzProviderSettings(t *testing.T) {
	out := extAuthzOut(t, "http-authz", "")
	var got *extauthzv3.ExtAuthz
	for _, f := range inboundHTTPFilters(t, out) {
		if f.GetName() == policy.ExtAuthzHTTPFilter {
			got = new(extauthzv3.ExtAuthz)
			if err := f.GetTypedConfig().UnmarshalTo(got); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got == nil {
		t.Fatal("no ext_authz filter on the inbound HTTP chain")
	}
	svc := got.GetHttpService()
	checks := []struct {
		what string
		ok   bool
	}{
		{"cluster", svc.GetServerUri().GetCluster() == build.ClusterName("authz.sys.svc.cluster.local", 8181, "")},
		{"timeout (Istio's default 10m)", svc.GetServerUri().GetTimeout().AsDuration().Minutes() == 10},
		{"pathPrefix", svc.GetPathPrefix() == "/check"},
		{"statusOnError", got.GetStatusOnError().GetCode() == 503},
		{"failOpen unset", !got.GetFailureModeAllow()},
		{"includeRequestHeadersInCheck", len(got.GetAllowedHeaders().GetPatterns()) == 2 && got.GetAllowedHeaders().GetPatterns()[1].GetPrefix() == "x-ext-"},
		{"includeAdditionalHeadersInCheck", len(svc.GetAuthorizationRequest().GetHeadersToAdd()) == 1 && svc.GetAuthorizationRequest().GetHeadersToAdd()[0].GetKey() == "x-from"},
		{"includeRequestBodyInCheck", got.GetWithRequestBody().GetMaxRequestBytes() == 4096 && got.GetWithRequestBody().GetAllowPartialMessage()},
		{"headersToUpstreamOnAllow", svc.GetAuthorizationResponse().GetAllowedUpstreamHeaders().GetPatterns()[0].GetExact() == "x-user"},
		{"headersToDownstreamOnDeny", svc.GetAuthorizationResponse().GetAllowedClientHeaders().GetPatterns()[0].GetExact() == "www-authenticate"},
		{"headersToDownstreamOnAllow", svc.GetAuthorizationResponse().GetAllowedClientHeadersOnSuccess().GetPatterns()[0].GetExact() == "set-cookie"},
		{"enabled by the CUSTOM rules", got.GetFilterEnabledMetadata().GetValue().GetStringMatch().GetPrefix() == policy.ExtAuthzPolicyPrefix},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: not as the provider says in %v", c.what, got)
		}
	}
	grpcOut := extAuthzOut(t, "grpc-authz", "")
	for _, f := range inboundHTTPFilters(t, grpcOut) {
		if f.GetName() == policy.ExtAuthzHTTPFilter {
			g := new(extauthzv3.ExtAuthz)
			if err := f.GetTypedConfig().UnmarshalTo(g); err != nil {
				t.Fatal(err)
			}
			if g.GetGrpcService().GetTimeout().AsDuration().Seconds() != 2 || !g.GetFailureModeAllow() ||
				g.GetGrpcService().GetEnvoyGrpc().GetAuthority() != "authz.sys.svc.cluster.local" {
				t.Errorf("gRPC provider: %v", g)
			}
		}
	}
}

// TestExtAuthzFailsClosed: CUSTOM policies that cannot be applied are
// reported and deny what their rules match.
func TestExtAuthzFailsClosed(t *testing.T) {
	second := `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext2, namespace: foo}
spec:
  action: CUSTOM
  provider: {name: http-authz}
  rules: [{to: [{operation: {paths: ["/other*"]}}]}]
`
	for _, tc := range []struct {
		name, provider, extra, reason string
	}{
		{"unknown provider", "nope", "", `has no provider "nope"`},
		{"not an ext_authz provider", "tracer", "", "is not an ext_authz provider"},
		{"two providers on one workload", "grpc-authz", second, "name 2 providers (grpc-authz, http-authz)"},
	} {
		out := extAuthzOut(t, tc.provider, tc.extra)
		found := false
		for _, p := range out.Problems {
			found = found || (p.Field == "spec.provider.name" && strings.Contains(p.Reason, tc.reason) && strings.Contains(p.Reason, "fail closed"))
		}
		if !found {
			t.Errorf("%s: no problem %q in %v", tc.name, tc.reason, out.Problems)
		}
		res := envoysim.New(out.Resources).Do(envoysim.Request{Inbound: true, IP: "10.0.0.5", Port: 80, Authority: "httpbin.foo:8000", Method: "GET", Path: "/admin/x", SourceIP: "10.1.1.1"})
		if len(res.ExtAuthz) != 0 || !strings.Contains(res.Denied, policy.ExtAuthzPolicyPrefix) {
			t.Errorf("%s: asked %v, denied %q; want denied by the CUSTOM rule, nobody asked", tc.name, res.ExtAuthz, res.Denied)
		}
	}
}

// inboundHTTPFilters are the HTTP filters of the first inbound chain with
// a connection manager.
func inboundHTTPFilters(t *testing.T, out *Output) []*hcmv3.HttpFilter {
	t.Helper()
	for _, r := range out.Resources[typeurl.Listener] {
		l, _ := r.Message.(*listenerv3.Listener)
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := new(hcmv3.HttpConnectionManager)
				if f.GetTypedConfig().MessageIs(hcm) && f.GetTypedConfig().UnmarshalTo(hcm) == nil && strings.HasPrefix(hcm.GetStatPrefix(), "inbound") {
					return hcm.GetHttpFilters()
				}
			}
		}
	}
	t.Fatal("no inbound connection manager")
	return nil
}
