package enroll

import (
	"context"
	"crypto/x509"
	"net"
	"time"
)

// Signer is the certificate authority seam: one CA (one root of trust, one
// SPIFFE trust domain) per mesh. Implementations must be safe for
// concurrent use.
type Signer interface {
	// SignCluster issues a client certificate for the key of csrPEM (a PEM
	// certificate request) valid for ttl, and returns it PEM-encoded,
	// followed by its intermediates. Whatever the request asks for, the
	// certificate's only URI SAN must be the cluster's SPIFFE ID
	// (spiffeid.Cluster(TrustDomain(mesh), cluster)) and it must allow
	// client authentication; the request's DNS and IP SANs (the spoke's
	// fallback server's names) may be carried, within the signer's
	// limits. The caller checks the result.
	SignCluster(ctx context.Context, mesh, cluster string, csrPEM []byte, ttl time.Duration) (chainPEM []byte, err error)
	// Roots are the mesh's roots of trust: a cluster certificate of the
	// mesh verifies against them and against no other mesh's.
	Roots(mesh string) (*x509.CertPool, error)
	// TrustDomain is the mesh's SPIFFE trust domain. Two meshes never
	// share one.
	TrustDomain(mesh string) (string, error)
}

// TrustBundler is implemented by a Signer that can hand out its mesh's
// roots as PEM; the Enrollment service sends them to the spoke
// (EnrollResponse.trust_bundle_pem). A Signer without it leaves the field
// empty: an x509.CertPool cannot be turned back into certificates.
type TrustBundler interface {
	TrustBundlePEM(mesh string) ([]byte, error)
}

// ServerNameChecker is implemented by a Signer that limits the DNS and IP
// SANs of cluster certificates: Enroll asks it before spending the join
// token, so that a spoke configured with a name it may not have is refused
// with its token intact.
type ServerNameChecker interface {
	CheckClusterServerNames(dns []string, ips []net.IP) error
}
