package policy_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// TestAuthorization: requests by principal, namespace, path, method, port,
// IP block and header are allowed or denied as Istio would.
func TestAuthorization(t *testing.T) {
	out, s := secOut(t, gentest.Decode(t, gentest.SecurityMesh+gentest.AuthorizationPolicies))
	if len(out.Problems) > 0 {
		t.Errorf("problems: %v", out.Problems)
	}
	withHeader := func(r envoysim.Request, k, v string) envoysim.Request { r.Headers = map[string]string{k: v}; return r }
	from := func(r envoysim.Request, ip string) envoysim.Request { r.SourceIP = ip; return r }
	rule := func(i string) string { return "ns[foo]-policy[httpbin]-rule[" + i + "]" }
	for _, tc := range []struct {
		name    string
		req     envoysim.Request
		allowed string // an ALLOW policy that must match; "" = denied
		denied  string // substring of Denied
		audited bool
	}{
		{"principal, method and path", mtls(inHTTP("GET", "/headers"), sleepBar), rule("0"), "", false},
		{"path prefix", mtls(inHTTP("GET", "/status/418?x=1"), sleepBar), rule("0"), "", false},
		{"wrong method", mtls(inHTTP("POST", "/headers"), sleepBar), "", "no ALLOW policy matches", false},
		{"wrong path", mtls(inHTTP("GET", "/ip"), sleepBar), "", "no ALLOW policy matches", false},
		{"other principal", mtls(inHTTP("GET", "/headers"), otherBar), "", "no ALLOW policy matches", false},
		{"no principal without mTLS", inHTTP("GET", "/headers"), "", "no ALLOW policy matches", false},
		{"namespace", mtls(inHTTP("PUT", "/anything"), opsAny), rule("1"), "", false},
		{"DENY wins over ALLOW", mtls(inHTTP("GET", "/admin/users"), opsAny), "", "ns[foo]-policy[deny-admin]-rule[0]", false},
		{"audit logs and lets through", mtls(inHTTP("DELETE", "/anything"), opsAny), rule("1"), "", true},
		{"header condition", withHeader(inHTTP("GET", "/x"), "x-token", "open-sesame"), rule("3"), "", false},
		{"header condition, wrong value", withHeader(inHTTP("GET", "/x"), "x-token", "nope"), "", "no ALLOW policy matches", false},
		{"not principals, not IP blocks, not paths, host with port", from(inHTTP("GET", "/public"), "172.16.0.1"), rule("4"), "", false},
		{"...from an excluded IP block", from(inHTTP("GET", "/public"), "10.2.2.2"), "", "no ALLOW policy matches", false},
		{"...with a principal", from(mtls(inHTTP("GET", "/public"), otherBar), "172.16.0.1"), "", "no ALLOW policy matches", false},
		{"...to an excluded path", from(inHTTP("GET", "/private/x"), "172.16.0.1"), "", "no ALLOW policy matches", false},
		{"...to another host", func() envoysim.Request {
			r := from(inHTTP("GET", "/public"), "172.16.0.1")
			r.Authority = "evil"
			return r
		}(), "", "no ALLOW policy matches", false},
		{"TCP from an allowed IP block to the allowed port", inTCP(9000, "192.168.3.4"), rule("2"), "", false},
		{"TCP from another address", inTCP(9000, "10.1.1.1"), "", "no ALLOW policy matches", false},
		{"TCP: a rule with HTTP-only fields allows nothing", mtls(inTCP(9000, "10.1.1.1"), sleepBar), "", "no ALLOW policy matches", false},
		{"TCP from the allowed namespace", mtls(inTCP(9000, "10.1.1.1"), opsAny), rule("1"), "", false},
		{"HTTP port from the allowed IP block: the rule names port 9000", from(inHTTP("GET", "/private/x"), "192.168.3.4"), "", "no ALLOW policy matches", false},
		{"undeclared port: policies apply to passthrough", inTCP(7777, "10.1.1.1"), "", "no ALLOW policy matches", false},
		{"undeclared port from the allowed namespace", mtls(inTCP(7777, "10.1.1.1"), opsAny), rule("1"), "", false},
	} {
		r := s.Do(tc.req)
		if r.Err != nil {
			t.Errorf("%s: %v", tc.name, r.Err)
			continue
		}
		switch {
		case tc.allowed != "" && (r.Denied != "" || !slices.Contains(r.Allowed, tc.allowed)):
			t.Errorf("%s: denied %q, allowed by %v; want allowed by %s", tc.name, r.Denied, r.Allowed, tc.allowed)
		case tc.allowed == "" && !strings.Contains(r.Denied, tc.denied):
			t.Errorf("%s: denied %q (allowed by %v), want denied by %q", tc.name, r.Denied, r.Allowed, tc.denied)
		}
		if audited := slices.Contains(r.Audited, "ns[istio-system]-policy[audit-delete]-rule[0]"); audited != tc.audited {
			t.Errorf("%s: audited %v, want %v", tc.name, r.Audited, tc.audited)
		}
	}
}

// TestAuthorizationSourceForms: the forms of principals, namespaces,
// service accounts, IP blocks and conditions, each in an ALLOW policy of
// its own, against callers that must and must not match.
func TestAuthorizationSourceForms(t *testing.T) {
	const sleepOps = "spiffe://cluster.local/ns/bar/sa/ops" // namespace bar, service account "ops"
	const opsx = "spiffe://cluster.local/ns/opsx/sa/tool"
	plain := inHTTP("GET", "/")
	for _, tc := range []struct {
		rule    string
		allowed []envoysim.Request
		denied  []envoysim.Request
	}{
		{`{from: [{source: {principals: ["*"]}}]}`, []envoysim.Request{mtls(plain, sleepBar), mtls(plain, opsAny)}, []envoysim.Request{plain}},
		{`{from: [{source: {principals: ["cluster.local/ns/bar/*"]}}]}`, []envoysim.Request{mtls(plain, sleepBar), mtls(plain, otherBar)}, []envoysim.Request{mtls(plain, opsAny), plain}},
		{`{from: [{source: {principals: ["*/sa/sleep"]}}]}`, []envoysim.Request{mtls(plain, sleepBar)}, []envoysim.Request{mtls(plain, otherBar), plain}},
		{`{from: [{source: {namespaces: [ops]}}]}`, []envoysim.Request{mtls(plain, opsAny)}, []envoysim.Request{mtls(plain, sleepOps), mtls(plain, opsx), plain}},
		{`{from: [{source: {namespaces: ["op*"]}}]}`, []envoysim.Request{mtls(plain, opsAny), mtls(plain, opsx)}, []envoysim.Request{mtls(plain, sleepOps), plain}},
		{`{from: [{source: {namespaces: ["*sx"]}}]}`, []envoysim.Request{mtls(plain, opsx)}, []envoysim.Request{mtls(plain, opsAny), plain}},
		{`{from: [{source: {namespaces: ["*"]}}]}`, []envoysim.Request{mtls(plain, opsx), mtls(plain, sleepBar)}, []envoysim.Request{plain}},
		{`{from: [{source: {notNamespaces: [bar]}}]}`, []envoysim.Request{mtls(plain, opsAny), plain}, []envoysim.Request{mtls(plain, sleepBar)}},
		{`{from: [{source: {serviceAccounts: [bar/sleep]}}]}`, []envoysim.Request{mtls(plain, sleepBar)}, []envoysim.Request{mtls(plain, otherBar), mtls(plain, sleepOps), plain}},
		{`{from: [{source: {ipBlocks: [10.1.0.0/16, 172.16.0.9]}}]}`, []envoysim.Request{plain, func() envoysim.Request { r := plain; r.SourceIP = "172.16.0.9"; return r }()},
			[]envoysim.Request{func() envoysim.Request { r := plain; r.SourceIP = "172.16.0.8"; return r }()}},
		{`{from: [{source: {remoteIpBlocks: [10.1.1.1]}}]}`, []envoysim.Request{plain}, []envoysim.Request{func() envoysim.Request { r := plain; r.SourceIP = "10.1.1.2"; return r }()}},
		{`{when: [{key: source.namespace, values: [ops]}, {key: source.principal, notValues: [cluster.local/ns/ops/sa/admin]}]}`,
			[]envoysim.Request{mtls(plain, opsAny)}, []envoysim.Request{mtls(plain, "spiffe://cluster.local/ns/ops/sa/admin"), mtls(plain, sleepBar)}},
		// trustDomains (the sidecar's handshake admits only the mesh's
		// trust domain, cluster.local, so other domains show as refusals).
		{`{from: [{source: {trustDomains: [cluster.local]}}]}`, []envoysim.Request{mtls(plain, sleepBar), mtls(plain, opsAny)}, []envoysim.Request{mtls(plain, foreign), plain}},
		{`{from: [{source: {trustDomains: [other.example]}}]}`, nil, []envoysim.Request{mtls(plain, sleepBar), plain}},
		{`{from: [{source: {trustDomains: ["cluster.*"]}}]}`, []envoysim.Request{mtls(plain, sleepBar)}, []envoysim.Request{plain}},
		{`{from: [{source: {trustDomains: ["clusterX*"]}}]}`, nil, []envoysim.Request{mtls(plain, sleepBar)}},
		{`{from: [{source: {trustDomains: ["*.local"]}}]}`, []envoysim.Request{mtls(plain, sleepBar)}, []envoysim.Request{plain}},
		{`{from: [{source: {trustDomains: ["*.example"]}}]}`, nil, []envoysim.Request{mtls(plain, sleepBar)}},
		{`{from: [{source: {trustDomains: ["*"]}}]}`, []envoysim.Request{mtls(plain, sleepBar)}, []envoysim.Request{plain}},
		{`{from: [{source: {notTrustDomains: [cluster.local]}}]}`, []envoysim.Request{plain}, []envoysim.Request{mtls(plain, sleepBar)}},
		{`{from: [{source: {notTrustDomains: [other.example]}}]}`, []envoysim.Request{plain, mtls(plain, sleepBar)}, nil},
		{`{when: [{key: source.trustDomain, values: [cluster.local], notValues: ["*.example"]}]}`, []envoysim.Request{mtls(plain, sleepBar)}, []envoysim.Request{plain}},
		{`{when: [{key: source.trustDomain, values: [other.example]}]}`, nil, []envoysim.Request{mtls(plain, sleepBar)}},
		{`{when: [{key: source.ip, values: [10.1.0.0/16]}, {key: destination.port, values: ["80"]}]}`, []envoysim.Request{plain}, []envoysim.Request{inTCP(9000, "10.1.1.1")}},
		{`{to: [{operation: {notMethods: [POST], paths: ["*.html"]}}]}`, []envoysim.Request{inHTTP("GET", "/a/b.html")}, []envoysim.Request{inHTTP("POST", "/a/b.html"), inHTTP("GET", "/a/b.htm")}},
		// Path templates (Envoy's uri_template): {*} one non-empty
		// segment, {**} any number, the query string aside.
		{`{to: [{operation: {paths: ["/api/{*}/items"]}}]}`, []envoysim.Request{inHTTP("GET", "/api/v1/items"), inHTTP("GET", "/api/v1/items?all=1")},
			[]envoysim.Request{inHTTP("GET", "/api/items"), inHTTP("GET", "/api/v1/v2/items"), inHTTP("GET", "/api//items"), inHTTP("GET", "/api/v1/items/x")}},
		{`{to: [{operation: {paths: ["/static/{**}"]}}]}`, []envoysim.Request{inHTTP("GET", "/static/a/b.css"), inHTTP("GET", "/static/")},
			[]envoysim.Request{inHTTP("GET", "/static"), inHTTP("GET", "/statics/a")}},
		{`{to: [{operation: {paths: ["/{**}/edit"]}}]}`, []envoysim.Request{inHTTP("GET", "/a/b/edit"), inHTTP("GET", "/a/edit")}, []envoysim.Request{inHTTP("GET", "/a/b/view"), inHTTP("GET", "/a/edit/x")}},
		{`{to: [{operation: {notPaths: ["/admin/{**}"]}}]}`, []envoysim.Request{inHTTP("GET", "/x"), inHTTP("GET", "/administrator")}, []envoysim.Request{inHTTP("GET", "/admin/users/1")}},
		{`{to: [{operation: {hosts: ["*.foo"]}}]}`, []envoysim.Request{func() envoysim.Request { r := plain; r.Authority = "httpbin.FOO"; return r }()}, []envoysim.Request{plain}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			out, s := secOut(t, gentest.Decode(t, gentest.SecurityMesh+"\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: foo}\nspec: {rules: ["+tc.rule+"]}\n"))
			if len(out.Problems) > 0 {
				t.Errorf("problems: %v", out.Problems)
			}
			for want, reqs := range map[bool][]envoysim.Request{true: tc.allowed, false: tc.denied} {
				for _, req := range reqs {
					r := s.Do(req)
					if r.Err != nil {
						t.Fatal(r.Err)
					}
					if (r.Denied == "") != want {
						t.Errorf("%s %s port %d from %s peer %q: denied %q, want allowed %v", req.Method, req.Path, req.Port, req.SourceIP, req.PeerCert, r.Denied, want)
					}
				}
			}
		})
	}
}

// TestAuthorizationEmptyRules: Istio's semantics of policies without
// rules or with an empty rule.
func TestAuthorizationEmptyRules(t *testing.T) {
	policy := func(name, action, rules string) string {
		return "\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: " + name + ", namespace: foo}\nspec: {action: " + action + rules + "}\n"
	}
	for _, tc := range []struct {
		name   string
		config string
		denied bool
	}{
		{"no policy: everything allowed", "", false},
		{"ALLOW with an empty rule allows everything", policy("a", "ALLOW", ", rules: [{}]"), false},
		{"ALLOW without rules denies everything", policy("a", "ALLOW", ""), true},
		{"ALLOW without rules next to one allowing everything", policy("a", "ALLOW", "") + policy("b", "ALLOW", ", rules: [{}]"), false},
		{"DENY without rules denies nothing", policy("a", "DENY", ""), false},
		{"DENY with an empty rule denies everything", policy("a", "DENY", ", rules: [{}]"), true},
		{"DENY with an empty rule beats ALLOW", policy("a", "DENY", ", rules: [{}]") + policy("b", "ALLOW", ", rules: [{}]"), true},
		{"AUDIT never denies", policy("a", "AUDIT", ", rules: [{}]"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := secOut(t, gentest.Decode(t, gentest.SecurityMesh+tc.config))
			for _, req := range []envoysim.Request{inHTTP("GET", "/"), mtls(inHTTP("POST", "/x"), sleepBar), inTCP(9000, "10.1.1.1"), inTCP(7777, "10.1.1.1")} {
				r := s.Do(req)
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if (r.Denied != "") != tc.denied {
					t.Errorf("port %d: denied %q, want denied %v", req.Port, r.Denied, tc.denied)
				}
			}
		})
	}
}

// TestAuthorizationHTTPOnlyFieldsOnTCP: Istio's documented handling of
// HTTP-only fields for TCP traffic: an ALLOW rule using them allows no TCP
// traffic; a DENY (or AUDIT) rule ignores them, so it matches more TCP
// traffic (here: all of it).
func TestAuthorizationHTTPOnlyFieldsOnTCP(t *testing.T) {
	policy := func(action string) string {
		return "\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: foo}\n" +
			"spec: {action: " + action + ", rules: [{to: [{operation: {methods: [GET], paths: [/x]}}]}]}\n"
	}
	for _, tc := range []struct {
		action              string
		httpGET, httpPOST   string // "allowed", "denied"
		tcp                 string
		auditedGET, audited bool
	}{
		{"ALLOW", "allowed", "denied", "denied", false, false},
		{"DENY", "denied", "allowed", "denied", false, false},
		{"AUDIT", "allowed", "allowed", "allowed", true, true},
	} {
		_, s := secOut(t, gentest.Decode(t, gentest.SecurityMesh+policy(tc.action)))
		for _, c := range []struct {
			req     envoysim.Request
			want    string
			audited bool
		}{{inHTTP("GET", "/x"), tc.httpGET, tc.auditedGET}, {inHTTP("POST", "/x"), tc.httpPOST, false}, {inTCP(9000, "10.1.1.1"), tc.tcp, tc.audited}} {
			r := s.Do(c.req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if got := map[bool]string{true: "denied", false: "allowed"}[r.Denied != ""]; got != c.want {
				t.Errorf("%s policy, %s port %d: %s (%s), want %s", tc.action, c.req.Method, c.req.Port, got, r.Denied, c.want)
			}
			if (len(r.Audited) > 0) != c.audited {
				t.Errorf("%s policy, %s port %d: audited %v, want %v", tc.action, c.req.Method, c.req.Port, r.Audited, c.audited)
			}
		}
	}
}

// TestAuthorizationBadInput: what cannot be translated is reported
// naming the policy and field, fails closed, and the rest still applies.
func TestAuthorizationBadInput(t *testing.T) {
	objs := gentest.Decode(t, gentest.SecurityMesh+`
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: foo}
spec:
  rules:
  - from: [{source: {principals: ["spiffe://cluster.local/ns/bar/sa/sleep"]}}]
  - from: [{source: {principals: ["cluster.local/*/sa/sleep"]}}]
  - when: [{key: "source.labels[app]", values: [sleep]}]
  - from: [{source: {principals: [cluster.local/ns/bar/sa/sleep]}}]
  - from: [{source: {trustDomains: [cluster.local/ns/bar, "clu*ster"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny, namespace: foo}
spec:
  action: DENY
  rules:
  - to: [{operation: {paths: [/secret]}}]
    when: [{key: "experimental.envoy.filters.foo[bar]", values: ["1"]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: foo}
spec:
  rules: [{to: [{operation: {paths: ["/ext*"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: templates, namespace: foo}
spec:
  rules:
  - to: [{operation: {paths: ["/t/{**}/{*}"]}}]
  - to: [{operation: {paths: ["/t/a{*}"]}}]
  - to: [{operation: {paths: ["/t/{id}"]}}]
  - to: [{operation: {paths: ["/t/{*}/a b"]}}]
  - to: [{operation: {paths: ["{*}/t"]}}]
`)
	// A CUSTOM policy whose provider the MeshConfig does not define.
	for i, o := range objs {
		if o.Name == "ext" {
			c := *o
			spec := proto.Clone(o.Spec).(*securityv1beta1.AuthorizationPolicy)
			spec.Action = securityv1beta1.AuthorizationPolicy_CUSTOM
			spec.ActionDetail = &securityv1beta1.AuthorizationPolicy_Provider{Provider: &securityv1beta1.AuthorizationPolicy_ExtensionProvider{Name: "authz"}}
			c.Spec = spec
			objs[i] = &c
		}
	}
	out, s := secOut(t, objs)
	for _, want := range []struct{ resource, field, reason string }{
		{"c1:AuthorizationPolicy foo/allow", "spec.rules[0].from[0].source.principals[0]", "without a scheme"},
		{"c1:AuthorizationPolicy foo/allow", "spec.rules[1].from[0].source.principals[0]", "wildcard is supported only"},
		{"c1:AuthorizationPolicy foo/allow", "spec.rules[2].when[0].key", `condition key "source.labels[app]" is not supported; this rule allows nothing`},
		{"c1:AuthorizationPolicy foo/allow", "spec.rules[4].from[0].source.trustDomains[0]", "contains '/'; this rule allows nothing"},
		{"c1:AuthorizationPolicy foo/deny", "spec.rules[0].when[0].key", "is not supported; the field is left out of this rule, which then matches more"},
		{"c1:AuthorizationPolicy foo/ext", "spec.provider.name", `has no provider "authz"; requests the CUSTOM rules match are denied (fail closed)`},
		{"c1:AuthorizationPolicy foo/templates", "spec.rules[0].to[0].operation.paths[0]", "{**} must be the last operator; this rule allows nothing"},
		{"c1:AuthorizationPolicy foo/templates", "spec.rules[1].to[0].operation.paths[0]", "only in a whole segment"},
		{"c1:AuthorizationPolicy foo/templates", "spec.rules[2].to[0].operation.paths[0]", "only in a whole segment"},
		{"c1:AuthorizationPolicy foo/templates", "spec.rules[3].to[0].operation.paths[0]", "not a valid literal"},
		{"c1:AuthorizationPolicy foo/templates", "spec.rules[4].to[0].operation.paths[0]", "must start with /"},
	} {
		found := false
		for _, p := range out.Problems {
			found = found || (p.Resource == want.resource && p.Field == want.field && strings.Contains(p.Reason, want.reason))
		}
		if !found {
			t.Errorf("no problem %s %s %q in %v", want.resource, want.field, want.reason, out.Problems)
		}
	}
	for _, tc := range []struct {
		name   string
		req    envoysim.Request
		denied string
	}{
		{"the well-formed rule still allows", mtls(inHTTP("GET", "/"), sleepBar), ""},
		{"the malformed rules allow nothing", mtls(inHTTP("GET", "/"), otherBar), "no ALLOW policy matches"},
		{"DENY with an unsupported condition denies its path for everyone", mtls(inHTTP("GET", "/secret"), sleepBar), "ns[foo]-policy[deny]-rule[0]"},
		{"CUSTOM without its provider denies what its rules match", mtls(inHTTP("GET", "/ext/x"), sleepBar), "ns[foo]-policy[ext]-rule[0]"},
		{"a malformed path template allows nothing", mtls(inHTTP("GET", "/t/a/b"), otherBar), "no ALLOW policy matches"},
	} {
		r := s.Do(tc.req)
		if r.Err != nil {
			t.Errorf("%s: %v", tc.name, r.Err)
			continue
		}
		if (tc.denied == "") != (r.Denied == "") || !strings.Contains(r.Denied, tc.denied) {
			t.Errorf("%s: denied %q, want %q", tc.name, r.Denied, tc.denied)
		}
	}
	// Everything else is still generated.
	if n := len(out.Resources[typeurl.Cluster]); n == 0 {
		t.Error("no clusters")
	}
}

// TestGatewayAuthorization: AuthorizationPolicies select gateway
// workloads as they select sidecars; their filters run in the gateway's
// HTTP connection managers and before its TCP proxies.
func TestGatewayAuthorization(t *testing.T) {
	objs := gentest.Decode(t, gentest.SecurityMesh+`
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}
  - {port: {number: 31400, name: tcp, protocol: TCP}, hosts: ["*"]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: httpbin, namespace: foo}
spec:
  hosts: ["*"]
  gateways: [istio-system/gw]
  http: [{route: [{destination: {host: httpbin.foo.svc.cluster.local, port: {number: 8000}}}]}]
  tcp: [{match: [{port: 31400}], route: [{destination: {host: httpbin.foo.svc.cluster.local, port: {number: 9000}}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ingress, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway, app: public}}
  rules: [{from: [{source: {remoteIpBlocks: [198.51.100.0/24]}}]}]
`)
	snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
	out := gen.Envoy(snap, proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "app=public\nistio=ingressgateway", IPs: "10.0.9.9"})
	gentest.ValidateDeep(t, out)
	s := envoysim.New(out.Resources)
	for _, tc := range []struct {
		req    envoysim.Request
		denied bool
	}{
		{envoysim.Request{ListenerPort: 80, Port: 80, Authority: "shop.example", Path: "/", Method: "GET", SourceIP: "198.51.100.7"}, false},
		{envoysim.Request{ListenerPort: 80, Port: 80, Authority: "shop.example", Path: "/", Method: "GET", SourceIP: "203.0.113.7"}, true},
		{envoysim.Request{ListenerPort: 31400, Port: 31400, SourceIP: "198.51.100.7"}, false},
		{envoysim.Request{ListenerPort: 31400, Port: 31400, SourceIP: "203.0.113.7"}, true},
	} {
		r := s.Do(tc.req)
		if r.Err != nil {
			t.Fatalf("port %d: %v", tc.req.ListenerPort, r.Err)
		}
		if (r.Denied != "") != tc.denied {
			t.Errorf("port %d from %s: denied %q, want denied %v", tc.req.ListenerPort, tc.req.SourceIP, r.Denied, tc.denied)
		}
	}
	// A gateway the Gateway selects and the policy does not.
	other := gen.Envoy(snap, proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.0.9.8"})
	if len(other.Resources[typeurl.Listener]) != 2 {
		t.Fatalf("the other gateway has listeners %v", other.Resources[typeurl.Listener])
	}
	for _, r := range other.Resources[typeurl.Listener] {
		if text := protoText(t, r); strings.Contains(text, policy.RBACHTTPFilter) || strings.Contains(text, policy.RBACNetworkFilter) {
			t.Errorf("listener %s of an unselected gateway has an RBAC filter", r.Name)
		}
	}
}

func protoText(t *testing.T, r gen.Resource) string {
	t.Helper()
	b, err := protojson.Marshal(r.Message)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
