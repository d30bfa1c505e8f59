// Package spiffeid builds and parses the SPIFFE IDs that name a spoke's
// cluster: spiffe://<trust-domain>/nave/cluster/<cluster>, carried as the
// only URI SAN of the cluster's client certificate. The hub (enrollment,
// authentication, the CA) and the spoke read and write the same form here.
//
// Everything here is stateless and safe for concurrent use.
package spiffeid

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// clusterPath is the path prefix of a cluster's SPIFFE ID.
const clusterPath = "/nave/cluster/"

var (
	// trustDomainRE is the SPIFFE trust domain alphabet (lowercase letters,
	// digits, dots, dashes, underscores).
	trustDomainRE = regexp.MustCompile(`^[a-z0-9._-]{1,255}$`)
	// labelRE is a DNS label, the form of mesh and cluster names.
	labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// ValidTrustDomain reports whether td is a SPIFFE trust domain name.
func ValidTrustDomain(td string) bool { return trustDomainRE.MatchString(td) }

// ValidName reports whether s is a DNS label, the form of mesh and cluster
// names.
func ValidName(s string) bool { return labelRE.MatchString(s) }

// Cluster returns the SPIFFE ID of cluster in trust domain td.
func Cluster(td, cluster string) (*url.URL, error) {
	if !ValidTrustDomain(td) {
		return nil, fmt.Errorf("trust domain %q is not a SPIFFE trust domain", td)
	}
	if !ValidName(cluster) {
		return nil, fmt.Errorf("cluster %q is not a DNS label", cluster)
	}
	return &url.URL{Scheme: "spiffe", Host: td, Path: clusterPath + cluster}, nil
}

// ParseCluster returns the trust domain and cluster a cluster SPIFFE ID
// names. Anything else (another scheme or path, a port, user info, a
// query or fragment, percent-encoding, an invalid name) is an error.
func ParseCluster(u *url.URL) (td, cluster string, err error) {
	switch {
	case u == nil:
		return "", "", fmt.Errorf("no SPIFFE ID")
	case u.Scheme != "spiffe":
		return "", "", fmt.Errorf("URI %q: scheme is not spiffe", u)
	case u.Opaque != "" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || u.RawPath != "":
		return "", "", fmt.Errorf("URI %q: a SPIFFE ID has only a trust domain and a plain path", u)
	case !ValidTrustDomain(u.Host):
		return "", "", fmt.Errorf("URI %q: %q is not a SPIFFE trust domain", u, u.Host)
	case !strings.HasPrefix(u.Path, clusterPath):
		return "", "", fmt.Errorf("URI %q: path is not %s<cluster>", u, clusterPath)
	}
	cluster = strings.TrimPrefix(u.Path, clusterPath)
	if !ValidName(cluster) {
		return "", "", fmt.Errorf("URI %q: cluster %q is not a DNS label", u, cluster)
	}
	return u.Host, cluster, nil
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
