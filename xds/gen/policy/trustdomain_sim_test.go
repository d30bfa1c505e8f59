package policy_test

import (
	"strings"
	"testing"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
)

// TestTrustDomainAliases: with MeshConfig trustDomainAliases, a peer of an
// alias trust domain is accepted as the mesh's own, by the inbound mTLS
// handshake and by AuthorizationPolicy principals and service accounts
// written for the mesh's trust domain (Istio's expansion); a peer of any
// other trust domain is still refused.
func TestTrustDomainAliases(t *testing.T) {
	const (
		aliasSleep = "spiffe://old.example/ns/bar/sa/sleep"
		aliasOther = "spiffe://old.example/ns/bar/sa/other"
	)
	plain := inHTTP("GET", "/")
	for _, tc := range []struct {
		rule            string
		allowed, denied []envoysim.Request
	}{
		{`{from: [{source: {principals: ["cluster.local/ns/bar/sa/sleep"]}}]}`,
			[]envoysim.Request{mtls(plain, sleepBar), mtls(plain, aliasSleep)}, []envoysim.Request{mtls(plain, aliasOther), mtls(plain, foreign), plain}},
		{`{from: [{source: {principals: ["old.example/ns/bar/sa/sleep"]}}]}`,
			[]envoysim.Request{mtls(plain, sleepBar), mtls(plain, aliasSleep)}, []envoysim.Request{mtls(plain, aliasOther), plain}},
		{`{from: [{source: {principals: ["cluster.local/ns/bar/*"]}}]}`,
			[]envoysim.Request{mtls(plain, otherBar), mtls(plain, aliasOther)}, []envoysim.Request{mtls(plain, opsAny), plain}},
		{`{from: [{source: {serviceAccounts: [bar/sleep]}}]}`,
			[]envoysim.Request{mtls(plain, sleepBar), mtls(plain, aliasSleep)}, []envoysim.Request{mtls(plain, aliasOther), plain}},
		{`{from: [{source: {principals: ["*"]}}]}`,
			[]envoysim.Request{mtls(plain, aliasSleep)}, []envoysim.Request{mtls(plain, foreign), plain}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			objs := gentest.Decode(t, gentest.SecurityMesh+"\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: foo}\nspec: {rules: ["+tc.rule+"]}\n")
			cfg, err := meshconfig.ParseMeshConfig([]byte("trustDomainAliases: [old.example]"))
			if err != nil {
				t.Fatal(err)
			}
			snap := (&mesh.Builder{MeshConfig: cfg}).Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
			out := gen.Envoy(snap, httpbinKey)
			gentest.ValidateDeep(t, out)
			if len(out.Problems) > 0 {
				t.Errorf("problems: %v", out.Problems)
			}
			s := envoysim.New(out.Resources)
			for want, reqs := range map[bool][]envoysim.Request{true: tc.allowed, false: tc.denied} {
				for _, req := range reqs {
					r := s.Do(req)
					if got := r.Err == nil && r.Denied == "" && len(r.Allowed) > 0; got != want {
						t.Errorf("peer %q: allowed %v (denied %q, err %v), want %v", req.PeerCert, got, r.Denied, r.Err, want)
					}
				}
			}
		})
	}
	// Without the alias, its peers fail the handshake.
	snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: gentest.Decode(t, gentest.SecurityMesh)}})
	s := envoysim.New(gen.Envoy(snap, httpbinKey).Resources)
	if r := s.Do(mtls(plain, sleepBar)); r.Err != nil || r.Denied != "" {
		t.Fatalf("a peer of the mesh's trust domain: %v %s", r.Err, r.Denied)
	}
	if r := s.Do(mtls(plain, aliasSleep)); !strings.Contains(r.Denied, "TLS handshake") {
		t.Errorf("without trustDomainAliases a peer of old.example is accepted (denied %q)", r.Denied)
	}
}
