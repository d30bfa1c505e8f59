package policy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// jwtPolicies: httpbin accepts tokens of issuer.example (inline keys,
// audience httpbin; also from header x-jwt), of other.example (keys
// fetched through a ServiceEntry) and, mesh-wide, of ghost.example (whose
// keys nave cannot give Envoy). It allows alice's requests, members of
// admins, holders of the write scope, any other.example subject, and
// everyone on /public; it denies /private to requests without a token.
const jwtPolicies = `
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: httpbin, namespace: foo}
spec:
  selector: {matchLabels: {app: httpbin}}
  jwtRules:
  - issuer: https://issuer.example
    audiences: [httpbin]
    jwks: '{"keys":[{"kty":"oct","kid":"k1","k":"c2VjcmV0"}]}'
    forwardOriginalToken: true
    outputClaimToHeaders: [{header: x-sub, claim: sub}]
  - issuer: https://issuer.example
    fromHeaders: [{name: x-jwt}]
    jwks: '{"keys":[{"kty":"oct","kid":"k1","k":"c2VjcmV0"}]}'
  - issuer: https://other.example
    jwksUri: https://keys.other.example/jwks
    timeout: 2s
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: keys, namespace: foo}
spec:
  hosts: [keys.other.example]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: ghost, namespace: istio-system}
spec:
  jwtRules: [{issuer: https://ghost.example, jwksUri: https://keys.ghost.example/jwks}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: jwt, namespace: foo}
spec:
  selector: {matchLabels: {app: httpbin}}
  rules:
  - from: [{source: {requestPrincipals: [https://issuer.example/alice]}}]
  - when: [{key: "request.auth.claims[groups]", values: [admins]}]
  - when: [{key: "request.auth.claims[scope]", values: [write]}]
  - from: [{source: {requestPrincipals: ["https://other.example/*"]}}]
  - to: [{operation: {paths: ["/public*"]}}]
  - from: [{source: {requestPrincipals: ["*/carol"]}}]
    when: [{key: request.auth.audiences, values: [httpbin]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: require-token, namespace: foo}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: DENY
  rules: [{from: [{source: {notRequestPrincipals: ["*"]}}], to: [{operation: {paths: ["/private*"]}}]}]
`

// TestJWT: RequestAuthentication refuses invalid tokens and lets requests
// without one through; AuthorizationPolicy reads the verified token.
func TestJWT(t *testing.T) {
	out, s := secOut(t, gentest.Decode(t, gentest.SecurityMesh+jwtPolicies))
	problem := false
	for _, p := range out.Problems {
		if p.Resource == "c1:RequestAuthentication istio-system/ghost" && p.Field == "spec.jwtRules[0].jwksUri" &&
			strings.Contains(p.Reason, "no service of the mesh serves keys.ghost.example:443") && strings.Contains(p.Reason, "fail closed") {
			problem = true
		} else {
			t.Errorf("unexpected problem %v", p)
		}
	}
	if !problem {
		t.Errorf("the ghost issuer's missing keys are not reported: %v", out.Problems)
	}
	tok := func(iss, sub string, claims map[string]any) *envoysim.Token {
		c := map[string]any{"iss": iss, "sub": sub, "aud": "httpbin"}
		for k, v := range claims {
			c[k] = v
		}
		return &envoysim.Token{Claims: c, KeyID: "k1"}
	}
	const iss, other, ghost = "https://issuer.example", "https://other.example", "https://ghost.example"
	for _, tc := range []struct {
		name   string
		path   string
		token  *envoysim.Token
		denied string // "" = allowed
	}{
		{"no token, public path", "/public/x", nil, ""},
		{"no token, other path", "/x", nil, "no ALLOW policy matches"},
		{"no token, private path", "/private", nil, "require-token"},
		{"alice", "/x", tok(iss, "alice", nil), ""},
		{"alice on the private path", "/private", tok(iss, "alice", nil), ""},
		{"bob", "/x", tok(iss, "bob", nil), "no ALLOW policy matches"},
		{"bob in admins (list claim)", "/x", tok(iss, "bob", map[string]any{"groups": []any{"dev", "admins"}}), ""},
		{"bob in admins (string claim)", "/x", tok(iss, "bob", map[string]any{"groups": "admins"}), ""},
		{"bob with the write scope (space-delimited)", "/x", tok(iss, "bob", map[string]any{"scope": "read write"}), ""},
		{"bob with the read scope", "/x", tok(iss, "bob", map[string]any{"scope": "read"}), "no ALLOW policy matches"},
		{"invalid token, public path", "/public", func() *envoysim.Token { k := tok(iss, "alice", nil); k.Invalid = true; return k }(), "does not verify"},
		{"wrong audience", "/public", tok(iss, "alice", map[string]any{"aud": "other"}), "does not verify"},
		{"unknown key", "/public", func() *envoysim.Token { k := tok(iss, "alice", nil); k.KeyID = "k2"; return k }(), "does not verify"},
		{"unknown issuer", "/public", tok("https://evil.example", "alice", nil), "does not verify"},
		{"issuer with keys nave could not give: fail closed", "/public", tok(ghost, "alice", nil), "does not verify"},
		{"other.example subject, keys fetched remotely", "/x", tok(other, "dave", nil), ""},
		{"token in the x-jwt header", "/x", func() *envoysim.Token { k := tok(iss, "alice", nil); k.Header = "x-jwt"; return k }(), ""},
		{"token in a header no provider reads is no token", "/private", func() *envoysim.Token { k := tok(iss, "alice", nil); k.Header = "x-other"; return k }(), "require-token"},
		{"carol (suffix form) with the audience", "/x", tok(iss, "carol", nil), ""},
		{"carol at other.example without an audience", "/x", func() *envoysim.Token { k := tok(other, "carol", nil); delete(k.Claims, "aud"); return k }(), ""},
	} {
		req := inHTTP("GET", tc.path)
		req.JWT = tc.token
		r := s.Do(req)
		if r.Err != nil {
			t.Errorf("%s: %v", tc.name, r.Err)
			continue
		}
		if (tc.denied == "") != (r.Denied == "") || !strings.Contains(r.Denied, tc.denied) {
			t.Errorf("%s: denied %q (allowed by %v), want %q", tc.name, r.Denied, r.Allowed, tc.denied)
		}
	}
	// Without a RequestAuthentication no token is ever verified:
	// requestPrincipals match nothing.
	_, plain := secOut(t, gentest.Decode(t, gentest.SecurityMesh+"\n---\n"+jwtPolicies[strings.Index(jwtPolicies, "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy"):]))
	req := inHTTP("GET", "/x")
	req.JWT = tok(iss, "alice", nil)
	if r := plain.Do(req); r.Err != nil || !strings.Contains(r.Denied, "no ALLOW policy matches") || slices.Contains(r.Allowed, "ns[foo]-policy[jwt]-rule[0]") {
		t.Errorf("without RequestAuthentication: denied %q, allowed %v, err %v", r.Denied, r.Allowed, r.Err)
	}
}

// TestRequestPrincipalForms: the request principal is "ISS/SUB" and the
// issuer may contain '/'; every form of a requestPrincipals value (exact,
// prefix, suffix, any) decides exactly as matching the joined string
// would, for issuers and subjects full of slashes.
func TestRequestPrincipalForms(t *testing.T) {
	issuers := []string{"a", "a/b", "https://x", "https://x/y", "b/"}
	subjects := []string{"s", "a/b", "/", "x/y/z"}
	var rules strings.Builder
	for _, iss := range issuers {
		rules.WriteString("  - {issuer: \"" + iss + "\", jwks: '{\"keys\":[{\"kty\":\"oct\",\"kid\":\"k1\",\"k\":\"c2VjcmV0\"}]}'}\n")
	}
	ra := "\n---\napiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: ra, namespace: foo}\nspec:\n  jwtRules:\n" + rules.String()
	patterns := []string{"*", "a/b/s", "https://x/y/x/y/z", "a/*", "a/b*", "https://*", "https://x/*", "*/s", "*/z", "*b//", "*x/y/z", "*y/a/b", "b//*", "b///"}
	for _, pat := range patterns {
		ap := "\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: foo}\nspec: {rules: [{from: [{source: {requestPrincipals: [\"" + pat + "\"]}}]}]}\n"
		out, s := secOut(t, gentest.Decode(t, gentest.SecurityMesh+ra+ap))
		if len(out.Problems) > 0 {
			t.Fatalf("%s: %v", pat, out.Problems)
		}
		for _, iss := range issuers {
			for _, sub := range subjects {
				principal := iss + "/" + sub
				var want bool
				switch {
				case pat == "*":
					want = true
				case strings.HasSuffix(pat, "*"):
					want = strings.HasPrefix(principal, strings.TrimSuffix(pat, "*"))
				case strings.HasPrefix(pat, "*"):
					want = strings.HasSuffix(principal, strings.TrimPrefix(pat, "*"))
				default:
					want = principal == pat
				}
				req := inHTTP("GET", "/")
				req.JWT = &envoysim.Token{Claims: map[string]any{"iss": iss, "sub": sub}, KeyID: "k1"}
				r := s.Do(req)
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if got := r.Denied == ""; got != want {
					t.Errorf("pattern %q, principal %q: allowed %v, want %v (%s)", pat, principal, got, want, r.Denied)
				}
			}
		}
	}
}
