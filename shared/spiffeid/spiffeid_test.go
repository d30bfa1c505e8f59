package spiffeid

import (
	"crypto/x509"
	"net/url"
	"testing"
)

func TestClusterRoundTrip(t *testing.T) {
	u, err := Cluster("acme.example", "east-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := u.String(), "spiffe://acme.example/nave/cluster/east-1"; got != want {
		t.Fatalf("Cluster = %s, want %s", got, want)
	}
	td, c, err := ParseCluster(u)
	if err != nil || td != "acme.example" || c != "east-1" {
		t.Fatalf("ParseCluster = %q, %q, %v", td, c, err)
	}
}

func TestParseClusterRefuses(t *testing.T) {
	for _, s := range []string{
		"https://acme.example/nave/cluster/east",
		"spiffe://acme.example/nave/cluster/",
		"spiffe://acme.example/nave/cluster/east/extra",
		"spiffe://acme.example/nave/cluster/East",
		"spiffe://acme.example/ns/default/sa/east",
		"spiffe://acme.example:8443/nave/cluster/east",
		"spiffe://user@acme.example/nave/cluster/east",
		"spiffe://acme.example/nave/cluster/east?x=1",
		"spiffe://acme.example/nave/cluster/east#x",
		"spiffe://acme.example/nave/cluster/e%61st",
		"spiffe://ACME.example/nave/cluster/east",
		"spiffe:///nave/cluster/east",
	} {
		u, err := url.Parse(s)
		if err != nil {
			continue // not even a URL: refused earlier
		}
		if td, c, err := ParseCluster(u); err == nil {
			t.Errorf("ParseCluster(%s) = %q, %q; want an error", s, td, c)
		}
	}
}

func TestFromCertificateWantsOneURI(t *testing.T) {
	a, _ := Cluster("acme.example", "a")
	b, _ := Cluster("acme.example", "b")
	for _, uris := range [][]*url.URL{nil, {a, b}} {
		if _, _, err := FromCertificate(&x509.Certificate{URIs: uris}); err == nil {
			t.Errorf("%d URI SANs accepted", len(uris))
		}
	}
	if _, c, err := FromCertificate(&x509.Certificate{URIs: []*url.URL{a}}); err != nil || c != "a" {
		t.Fatalf("one URI SAN: %q, %v", c, err)
	}
}
