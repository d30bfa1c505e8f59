package enroll

import (
	"crypto/tls"
	"crypto/x509"
	"sync/atomic"

	"github.com/navemesh/nave/shared/tlsconfig"
	"github.com/navemesh/nave/shared/tlspin"
)

// CAHash is the pin of a CA certificate (see Options.HubCAHash).
func CAHash(cert *x509.Certificate) string { return tlspin.Hash(cert) }

// pinnedTLS is a client configuration for the first contact with the hub,
// before the spoke trusts any root: the hub's chain must contain a
// certificate whose public key has the pinned hash, and the hub's leaf
// must verify against that certificate (as the only root) for serverName.
// The matching certificate is kept in pinned, to be trusted from then on.
func pinnedTLS(serverName, pin string, pinned *atomic.Pointer[x509.Certificate]) *tls.Config {
	// The standard verification needs roots the spoke does not have yet;
	// this does the whole verification instead.
	c := tlsconfig.VerifyingClient(func(cs tls.ConnectionState) error {
		ca, err := tlspin.Verify(cs.PeerCertificates, serverName, pin)
		if err != nil {
			return err
		}
		pinned.Store(ca)
		return nil
	}, nil)
	c.ServerName = serverName
	return c
}
