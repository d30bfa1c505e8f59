package meshconfig

import (
	"strings"
	"testing"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

func TestWithNetwork(t *testing.T) {
	we := func(network string, specLabels, meta map[string]string) *Object {
		o := &Object{Kind: mustKind(t, "WorkloadEntry"), Name: "vm", Namespace: "ns", Labels: meta,
			Spec: &networkingv1alpha3.WorkloadEntry{Address: "10.0.0.1", Network: network, Labels: specLabels}}
		o.Version = o.ComputeVersion()
		return o
	}
	for _, tc := range []struct {
		name     string
		o        *Object
		fallback string
		want     string
	}{
		{"field wins", we("a", map[string]string{NetworkLabel: "b"}, nil), "c", "a"},
		{"spec label", we("", map[string]string{NetworkLabel: "b"}, map[string]string{NetworkLabel: "m"}), "c", "b"},
		{"metadata label", we("", nil, map[string]string{NetworkLabel: "m"}), "c", "m"},
		{"fallback", we("", nil, nil), "c", "c"},
		{"none", we("", nil, nil), "", ""},
	} {
		before := tc.o.Version
		got := WithNetwork(tc.o, tc.fallback)
		if n := got.Spec.(*networkingv1alpha3.WorkloadEntry).GetNetwork(); n != tc.want {
			t.Errorf("%s: network %q, want %q", tc.name, n, tc.want)
		}
		if tc.o.Version != before || tc.o.Spec.(*networkingv1alpha3.WorkloadEntry).GetNetwork() != "" && tc.name != "field wins" {
			t.Errorf("%s: the given object was modified", tc.name)
		}
		if got != tc.o && got.Version != got.ComputeVersion() {
			t.Errorf("%s: version %q not recomputed", tc.name, got.Version)
		}
		if (got == tc.o) != (tc.name == "field wins" || tc.name == "none") {
			t.Errorf("%s: copied %v", tc.name, got != tc.o)
		}
	}

	se := &Object{Kind: mustKind(t, "ServiceEntry"), Name: "se", Namespace: "ns", Spec: &networkingv1alpha3.ServiceEntry{
		Hosts: []string{"a.example"}, Endpoints: []*networkingv1alpha3.WorkloadEntry{
			{Address: "10.0.0.1", Network: "x"}, {Address: "10.0.0.2", Labels: map[string]string{NetworkLabel: "y"}}, {Address: "10.0.0.3"}}}}
	got := WithNetwork(se, "z").Spec.(*networkingv1alpha3.ServiceEntry).GetEndpoints()
	if got[0].GetNetwork() != "x" || got[1].GetNetwork() != "y" || got[2].GetNetwork() != "z" {
		t.Errorf("service entry endpoints' networks: %q %q %q, want x y z", got[0].GetNetwork(), got[1].GetNetwork(), got[2].GetNetwork())
	}
	if se.Spec.(*networkingv1alpha3.ServiceEntry).GetEndpoints()[2].GetNetwork() != "" {
		t.Error("the given service entry was modified")
	}
}

func mustKind(t *testing.T, name string) *Kind {
	t.Helper()
	for _, k := range Kinds() {
		if k.Kind == name {
			return k
		}
	}
	t.Fatalf("no kind %s", name)
	return nil
}

// A registry Service's external addresses are IP addresses or host
// names; anything else is refused with the field named.
func TestRegistryServiceExternalAddresses(t *testing.T) {
	svc := func(addrs ...string) *Object {
		return &Object{Kind: mustKind(t, "Service"), Name: "gw", Namespace: "ns",
			Spec: &meshconfigv1.Service{Hostname: "gw.ns.svc.cluster.local", ExternalAddresses: addrs}}
	}
	if err := Validate(svc("192.0.2.1", "2001:db8::1", "lb.example.com")); err != nil {
		t.Errorf("valid external addresses refused: %v", err)
	}
	for _, bad := range []string{"", "lb example", "*.example.com", "192.0.2.1:15443", "http://lb"} {
		err := Validate(svc("192.0.2.1", bad))
		if err == nil || !strings.Contains(err.Error(), "externalAddresses[1]") {
			t.Errorf("external address %q: error %v, want one naming externalAddresses[1]", bad, err)
		}
	}
}
