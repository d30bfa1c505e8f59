package spiffeid

import (
	"crypto/x509"
	"net/url"
	"strings"
	"testing"

	"github.com/navemesh/nave/internal/x509test"
)

func TestVerifyChain(t *testing.T) {
	ca := x509test.NewAuthority("mesh")
	want := ID{TrustDomain: "cluster.local", Path: "/nave/cluster/c1"}
	issue := func(usage x509.ExtKeyUsage, uris ...string) [][]byte {
		var us []*url.URL
		for _, u := range uris {
			parsed, _ := url.Parse(u)
			us = append(us, parsed)
		}
		c := ca.ServerCert("x")
		leaf := ca.Issue(&x509.Certificate{URIs: us, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}, c.Leaf.PublicKey)
		return [][]byte{leaf.Raw, ca.Cert.Raw}
	}
	if leaf, err := VerifyChain(issue(x509.ExtKeyUsageServerAuth, want.String()), ca.Pool(), x509.ExtKeyUsageServerAuth, want); err != nil || leaf == nil {
		t.Fatalf("a good chain: %v", err)
	}
	for _, c := range []struct {
		name string
		raw  [][]byte
		want string
	}{
		{"no certificate", nil, "no certificate"},
		{"garbage", [][]byte{[]byte("x")}, "certificate 0"},
		{"another identity", issue(x509.ExtKeyUsageServerAuth, "spiffe://cluster.local/nave/cluster/c2"), "want spiffe://cluster.local/nave/cluster/c1"},
		{"two identities", issue(x509.ExtKeyUsageServerAuth, want.String(), "spiffe://cluster.local/x"), "want"},
		{"a client certificate", issue(x509.ExtKeyUsageClientAuth, want.String()), "usage"},
		{"another CA", func() [][]byte {
			o := x509test.NewAuthority("other")
			c := o.ServerCert("x")
			u, _ := url.Parse(want.String())
			return [][]byte{o.Issue(&x509.Certificate{URIs: []*url.URL{u}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, c.Leaf.PublicKey).Raw}
		}(), "unknown authority"},
	} {
		if _, err := VerifyChain(c.raw, ca.Pool(), x509.ExtKeyUsageServerAuth, want); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v; want one saying %q", c.name, err, c.want)
		}
	}
}
