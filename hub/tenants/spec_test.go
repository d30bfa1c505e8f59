package tenants_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/navemesh/nave/hub/tenants"
)

const acmeSpec = `apiVersion: nave.io/v1alpha1
kind: Mesh
metadata:
  name: acme
spec:
  trustDomain: acme.example
  limits:
    proxies: 500
    pushesPerSecond: 2.5
  meshConfig:
    rootNamespace: acme-system
    trustDomainAliases: [old.acme.example]
`

func TestDecodeSpec(t *testing.T) {
	s, err := tenants.DecodeSpec([]byte(acmeSpec))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "acme" || s.TrustDomain != "acme.example" || s.Limits != (tenants.Limits{Proxies: 500, PushesPerSecond: 2.5}) {
		t.Errorf("decoded %+v", s)
	}
	if s.Config.GetRootNamespace() != "acme-system" || s.Config.GetTrustDomain() != "acme.example" ||
		len(s.Config.GetTrustDomainAliases()) != 1 {
		t.Errorf("meshConfig %v", s.Config)
	}

	if len(s.Networks.GetNetworks()) != 0 {
		t.Errorf("a document without meshNetworks has networks %v", s.Networks)
	}
	s, err = tenants.DecodeSpec([]byte(acmeSpec + "  meshNetworks:\n    networks:\n      net1:\n        endpoints: [{fromCidr: 10.1.0.0/16}]\n        gateways: [{address: gw.acme.example, port: 15443, locality: r1/z1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Networks.GetNetworks()["net1"]; n.GetEndpoints()[0].GetFromCidr() != "10.1.0.0/16" || n.GetGateways()[0].GetAddress() != "gw.acme.example" {
		t.Errorf("meshNetworks %v", s.Networks)
	}

	// The trust domain may come from the MeshConfig alone.
	s, err = tenants.DecodeSpec([]byte("apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: b}\nspec:\n  meshConfig: {trustDomain: b.example}\n"))
	if err != nil || s.TrustDomain != "b.example" {
		t.Errorf("trust domain from meshConfig: %v, %v", s, err)
	}

	doc, err := tenants.EncodeSpec("seeded", "seeded.local", tenants.Limits{Spokes: 3}, []byte("rootNamespace: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err = tenants.DecodeSpec(doc)
	if err != nil || s.Name != "seeded" || s.Limits.Spokes != 3 || s.Config.GetRootNamespace() != "x" {
		t.Errorf("EncodeSpec does not round-trip: %v, %v\n%s", s, err, doc)
	}
}

func TestDecodeSpecNamesTheField(t *testing.T) {
	for _, tc := range []struct{ name, doc, field string }{
		{"two documents", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b}\n---\nkind: Mesh\n", ""},
		{"unknown top", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b}\nstatus: {}\n", "status"},
		{"apiVersion", "apiVersion: v1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b}\n", "apiVersion"},
		{"kind", "apiVersion: nave.io/v1alpha1\nkind: Mash\nmetadata: {name: a}\nspec: {trustDomain: a.b}\n", "kind"},
		{"name missing", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nspec: {trustDomain: a.b}\n", "metadata.name"},
		{"name not a label", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: Acme_1}\nspec: {trustDomain: a.b}\n", "metadata.name"},
		{"unknown spec field", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, proxies: 3}\n", "spec.proxies"},
		{"no trust domain", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {}\n", "spec.trustDomain"},
		{"bad trust domain", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: A..b}\n", "spec.trustDomain"},
		{"negative limit", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, limits: {proxies: -1}}\n", "spec.limits.proxies"},
		{"fractional limit", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, limits: {spokes: 1.5}}\n", "spec.limits.spokes"},
		{"limit type", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, limits: {pushesPerSecond: fast}}\n", "spec.limits.pushesPerSecond"},
		{"meshConfig field", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, meshConfig: {rootNamespaces: x}}\n", "spec.meshConfig.rootNamespaces"},
		{"meshConfig trust domain differs", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, meshConfig: {trustDomain: c.d}}\n", "spec.meshConfig.trustDomain"},
		{"meshNetworks not a mapping", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, meshNetworks: [x]}\n", "spec.meshNetworks"},
		{"meshNetworks unknown field", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, meshNetworks: {networks: {n1: {gateway: []}}}}\n", "spec.meshNetworks.networks[n1].gateway"},
		{"meshNetworks CIDR", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, meshNetworks: {networks: {n1: {endpoints: [{fromCidr: 10.0.0.0/40}]}}}}\n", "spec.meshNetworks.networks[n1].endpoints[0].fromCidr"},
		{"meshNetworks gateway", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, meshNetworks: {networks: {n1: {gateways: [{port: 15443}]}}}}\n", "spec.meshNetworks.networks[n1].gateways[0]"},
		{"alias is own", "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b, meshConfig: {trustDomainAliases: [a.b]}}\n", "spec.meshConfig.trustDomainAliases[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tenants.DecodeSpec([]byte(tc.doc))
			var fe *tenants.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v: want a FieldError", err)
			}
			if fe.Field != tc.field || (tc.field != "" && !strings.HasPrefix(err.Error(), tc.field+": ")) {
				t.Errorf("err %q names field %q; want %q", err, fe.Field, tc.field)
			}
		})
	}
}

// FuzzDecodeSpec: no input panics the decoder, and what it accepts it
// accepts again as stored (Raw), to the same mesh.
func FuzzDecodeSpec(f *testing.F) {
	f.Add([]byte(acmeSpec))
	f.Add([]byte("apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: a}\nspec: {trustDomain: a.b}\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		s, err := tenants.DecodeSpec(doc)
		if err != nil {
			var fe *tenants.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a FieldError", err)
			}
			return
		}
		if tenants.ValidateName(s.Name) != nil || s.TrustDomain == "" || s.Config == nil || s.Config.GetTrustDomain() != s.TrustDomain {
			t.Fatalf("accepted %+v", s)
		}
		again, err := tenants.DecodeSpec(s.Raw)
		if err != nil || again.Name != s.Name || again.TrustDomain != s.TrustDomain || again.Limits != s.Limits {
			t.Fatalf("Raw decodes to %+v, %v; first %+v", again, err, s)
		}
	})
}
