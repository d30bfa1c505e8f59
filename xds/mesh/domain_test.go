package mesh

import (
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
)

// TestShortHostsCompleteWithTheirClustersSuffix: a VirtualService's short
// host is completed with the domain suffix of the cluster it came from
// (issue 18 item 9), and a service's hostname is recognised as
// name.namespace.svc.<suffix> for any of the mesh's suffixes.
func TestShortHostsCompleteWithTheirClustersSuffix(t *testing.T) {
	vs := func(name string) []*meshconfig.Object {
		objs, errs := meshconfig.DecodeYAML([]byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: `+name+`, namespace: shop}
spec:
  hosts: [reviews]
  http: [{route: [{destination: {host: reviews}}]}]
`), "vs.yaml")
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return objs
	}
	s := Build("m", []ClusterInput{
		{Name: "corp", Synced: true, DomainSuffix: "corp.example", Objects: vs("a")},
		{Name: "plain", Synced: true, Objects: vs("b")},
	})
	if got := s.VirtualServices["reviews.shop.svc.corp.example"]; len(got) != 1 || got[0].Cluster != "corp" {
		t.Errorf("reviews.shop.svc.corp.example has VirtualServices %v, want corp's", got)
	}
	if got := s.VirtualServices["reviews.shop.svc.cluster.local"]; len(got) != 1 || got[0].Cluster != "plain" {
		t.Errorf("reviews.shop.svc.cluster.local has VirtualServices %v, want plain's (the default suffix)", got)
	}
	if d := s.DomainSuffix("corp"); d != "corp.example" {
		t.Errorf("corp's suffix %q", d)
	}
	for host, want := range map[string]string{"reviews.shop.svc.corp.example": "corp.example", "reviews.shop.svc.cluster.local": "cluster.local", "api.example.com": ""} {
		got, ok := s.ServiceSuffix(&Service{Hostname: host, Namespace: "shop"})
		if got != want || ok != (want != "") {
			t.Errorf("ServiceSuffix(%s) = %q, %v; want %q", host, got, ok, want)
		}
	}
}
