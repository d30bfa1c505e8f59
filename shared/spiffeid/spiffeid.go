// Package spiffeid builds and parses the SPIFFE IDs nave issues and
// checks (id.go): a workload's, spiffe://<td>/ns/<namespace>/sa/<sa>, and a
// spoke's cluster, spiffe://<trust-domain>/nave/cluster/<cluster>, carried
// as the only URI SAN of the cluster's client certificate. The hub (CA,
// enrollment, authentication) and the spoke read and write them here, with
// one set of rules.
//
// Everything here is stateless and safe for concurrent use.
package spiffeid

import (
	"crypto/x509"
	"fmt"
	"net/url"
)

// ValidTrustDomain reports whether td is a trust domain nave accepts
// (ValidateTrustDomain says why not).
func ValidTrustDomain(td string) bool { return ValidateTrustDomain(td) == nil }

// ValidName reports whether s is a DNS label, the form of mesh and cluster
// names (ValidateName says why not).
func ValidName(s string) bool { return ValidateName(s) == nil }

// Cluster returns the SPIFFE ID of cluster in trust domain td, as a URL.
func Cluster(td, cluster string) (*url.URL, error) {
	id, err := ClusterID(td, cluster)
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: "spiffe", Host: id.TrustDomain, Path: id.Path}, nil
}

// ParseCluster returns the trust domain and cluster a cluster SPIFFE ID
// names, with ParseClusterID's rules: anything else (another scheme or
// path, a port, user info, a query or fragment, percent-encoding, an
// invalid name) is an error.
func ParseCluster(u *url.URL) (td, cluster string, err error) {
	if u == nil {
		return "", "", fmt.Errorf("no SPIFFE ID")
	}
	if u.RawPath != "" || u.Opaque != "" {
		return "", "", fmt.Errorf("URI %q: a SPIFFE ID has only a trust domain and a plain path", u)
	}
	id, err := ParseClusterID(u.String())
	if err != nil {
		return "", "", err
	}
	cluster, _ = id.Cluster()
	return id.TrustDomain, cluster, nil
}

// FromCertificate returns the trust domain and cluster of a cluster
// certificate. The certificate must carry exactly one URI SAN, a cluster
// SPIFFE ID.
func FromCertificate(cert *x509.Certificate) (td, cluster string, err error) {
	if n := len(cert.URIs); n != 1 {
		return "", "", fmt.Errorf("certificate has %d URI SANs, want exactly one SPIFFE ID", n)
	}
	return ParseCluster(cert.URIs[0])
}
