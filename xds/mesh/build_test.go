package mesh

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
)

func decode(t *testing.T, yaml string) []*meshconfig.Object {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(yaml), "test.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	return objs
}

func servicesJSON(t *testing.T, s *Snapshot) string {
	t.Helper()
	b, err := json.Marshal(s.Services)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const entries = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a, namespace: ns}
spec:
  hosts: [a.example, shared.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.2}, {address: 10.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: sel, namespace: ns}
spec:
  hosts: [shared.example]
  ports: [{number: 81, name: http2, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: x}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: x, namespace: ns}
spec: {address: 10.0.1.1, labels: {app: x}}
`

const otherCluster = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: b, namespace: ns}
spec:
  hosts: [a.example]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.9.0.1}]
`

// TestBuilderMatchesBuild checks that a Builder reusing services between
// builds gives what a fresh Build gives, and never changes an earlier
// snapshot.
func TestBuilderMatchesBuild(t *testing.T) {
	c1 := decode(t, entries)
	c2 := decode(t, otherCluster)
	in1 := []ClusterInput{{Name: "c1", Synced: true, Objects: c1}, {Name: "c2", Synced: true, Objects: c2}}
	var b Builder
	s1 := b.Build("m", in1)
	if got, want := servicesJSON(t, s1), servicesJSON(t, Build("m", in1)); got != want {
		t.Fatalf("first build differs:\n%s\n%s", got, want)
	}
	before := servicesJSON(t, s1)
	if n := len(s1.Services["a.example"].Endpoints); n != 3 {
		t.Fatalf("a.example has %d endpoints, want 3 (two clusters merged)", n)
	}
	if n := len(s1.Services["shared.example"].Ports); n != 2 {
		t.Fatalf("shared.example has %d ports, want 2 (two entries merged)", n)
	}

	// The second cluster goes stale and its entry changes; the first
	// cluster's objects are the same pointers.
	c2b := decode(t, otherCluster+"  addresses: [240.0.0.1]\n")
	in2 := []ClusterInput{{Name: "c1", Synced: true, Objects: c1}, {Name: "c2", Stale: true, Objects: c2b}}
	s2 := b.Build("m", in2)
	if got, want := servicesJSON(t, s2), servicesJSON(t, Build("m", in2)); got != want {
		t.Fatalf("second build differs:\n%s\n%s", got, want)
	}
	if servicesJSON(t, s1) != before {
		t.Fatal("the second build changed the first snapshot")
	}
	// The first cluster alone: a.example is shared as is.
	in3 := []ClusterInput{{Name: "c1", Synced: true, Objects: c1}}
	s3 := b.Build("m", in3)
	if got, want := servicesJSON(t, s3), servicesJSON(t, Build("m", in3)); got != want {
		t.Fatalf("third build differs:\n%s\n%s", got, want)
	}
	if servicesJSON(t, s1) != before {
		t.Fatal("the third build changed the first snapshot")
	}
}

// TestBuildCarriesSecurityPolicies: the security kinds reach the snapshot,
// sorted by namespace/name, and the trust domain defaults to cluster.local
// unless the Builder names one.
func TestBuildCarriesSecurityPolicies(t *testing.T) {
	objs := decode(t, `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: b, namespace: ns}
spec: {mtls: {mode: STRICT}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: a, namespace: ns}
spec: {mtls: {mode: DISABLE}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny, namespace: ns}
spec: {action: DENY, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: ns}
spec: {jwtRules: [{issuer: https://issuer.example}]}
`)
	s := Build("m", []ClusterInput{{Name: "c1", Synced: true, Objects: objs}})
	var got []string
	for _, list := range [][]*Config{s.PeerAuthentications, s.AuthorizationPolicies, s.RequestAuthentications} {
		for _, c := range list {
			got = append(got, c.Ref())
		}
	}
	want := []string{"c1:PeerAuthentication ns/a", "c1:PeerAuthentication ns/b", "c1:AuthorizationPolicy ns/deny", "c1:RequestAuthentication ns/jwt"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("security config %v, want %v", got, want)
	}
	if s.PeerAuthentications[0].PeerAuthentication().GetMtls().GetMode().String() != "DISABLE" ||
		s.AuthorizationPolicies[0].AuthorizationPolicy().GetAction().String() != "DENY" ||
		s.RequestAuthentications[0].RequestAuthentication().GetJwtRules()[0].GetIssuer() != "https://issuer.example" {
		t.Error("spec accessors do not return the specs")
	}
	if s.TrustDomain != DefaultTrustDomain {
		t.Errorf("trust domain %q, want %q", s.TrustDomain, DefaultTrustDomain)
	}
	b := Builder{TrustDomain: "example.org"}
	if got := b.Build("m", []ClusterInput{{Name: "c1", Synced: true, Objects: objs}}).TrustDomain; got != "example.org" {
		t.Errorf("Builder.TrustDomain: snapshot has %q", got)
	}
	// A WorkloadEntry change alone takes the incremental path; with a new
	// trust domain it must not keep the old one.
	base := append(decode(t, entries), objs...)
	in := func(we string) []ClusterInput {
		return []ClusterInput{{Name: "c1", Synced: true, Objects: append(slices.Clone(base), decode(t, we)...)}}
	}
	var ib Builder
	ib.Build("m", in("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: wy, namespace: ns}\nspec: {address: 10.0.1.2, labels: {app: z}}\n"))
	ib.TrustDomain = "example.org"
	s2 := ib.Build("m", in("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: wy, namespace: ns}\nspec: {address: 10.0.1.3, labels: {app: z}}\n"))
	if s2.TrustDomain != "example.org" {
		t.Errorf("after a WorkloadEntry change and a new trust domain the snapshot has %q", s2.TrustDomain)
	}
	ib.TrustDomain = ""
	s3 := ib.Build("m", in("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: wy, namespace: ns}\nspec: {address: 10.0.1.4, labels: {app: z}}\n"))
	afterFull := ib.last
	s4 := ib.Build("m", in("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: wy, namespace: ns}\nspec: {address: 10.0.1.5, labels: {app: z}}\n"))
	if s3.TrustDomain != DefaultTrustDomain || s4.TrustDomain != DefaultTrustDomain || len(s4.PeerAuthentications) != 2 || len(s4.AuthorizationPolicies) != 1 {
		t.Errorf("trust domains %q, %q; an incremental build keeps %d PeerAuthentications, %d AuthorizationPolicies",
			s3.TrustDomain, s4.TrustDomain, len(s4.PeerAuthentications), len(s4.AuthorizationPolicies))
	}
	if ib.last != afterFull { // an incremental build updates the remembered state in place
		t.Error("the last build was not incremental: the test does not exercise that path")
	}
}

// TestServiceEntrySubjectAltNames: a service carries the subjectAltNames
// of every ServiceEntry of its host, each once, in the order given; the
// Builder's shared services stay as they were.
func TestServiceEntrySubjectAltNames(t *testing.T) {
	objs := decode(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a, namespace: ns}
spec:
  hosts: [a.example, b.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  subjectAltNames: [spiffe://td/ns/ns/sa/a, a.example]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: b, namespace: ns}
spec:
  hosts: [b.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  subjectAltNames: [a.example, b.example]
`)
	var b Builder
	in := []ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}}
	for range 2 { // the second build reuses the entries' services
		s := b.Build("m", in)
		if got := s.Services["a.example"].SubjectAltNames; !slices.Equal(got, []string{"spiffe://td/ns/ns/sa/a", "a.example"}) {
			t.Errorf("a.example SANs %v", got)
		}
		if got := s.Services["b.example"].SubjectAltNames; !slices.Equal(got, []string{"spiffe://td/ns/ns/sa/a", "a.example", "b.example"}) {
			t.Errorf("b.example SANs %v", got)
		}
	}
}
