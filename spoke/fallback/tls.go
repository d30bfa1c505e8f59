package fallback

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/shared/tlsconfig"
	"github.com/navemesh/nave/xds/ads"
)

// Trust gives the mesh's trust domain and roots (PEM) as the spoke knows
// them now: the trust bundle of the remote view, else the one it got at
// enrollment.
type Trust func() (trustDomain string, rootsPEM []byte)

// ServerTLS is the fallback listener's TLS: the spoke serves its cluster
// certificate (spiffe://<td>/nave/cluster/<cluster>, issued by the mesh
// CA, so proxies verify it with the mesh roots they already hold), and
// requires a client certificate that chains to the mesh roots — the
// workload certificate a proxy uses with the hub. cert gives the newest
// cluster certificate (the enrollment Renewer's).
func ServerTLS(cert func() (*tls.Certificate, error), trust Trust) *tls.Config {
	// The proxies are Envoy (whose upstream TLS is at most 1.2 unless
	// told otherwise) and gRPC clients: foreign peers.
	c := tlsconfig.Server(tlsconfig.Foreign, cert)
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		_, pem := trust()
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("fallback: no mesh roots to verify proxies with")
		}
		return tlsconfig.MutualServer(tlsconfig.Foreign, cert, tls.RequireAndVerifyClientCert, pool), nil
	}
	return c
}

// Authenticator decides a proxy stream's identity from its verified
// workload certificate, as the hub does: the certificate's only URI SAN is
// spiffe://<td>/ns/<namespace>/sa/<service account>, td the mesh's trust
// domain; the mesh is the spoke's own (it serves no other).
func Authenticator(mesh string, trust Trust) ads.Authenticator {
	return ads.AuthenticatorFunc(func(ctx context.Context) (ads.WorkloadIdentity, error) {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return ads.WorkloadIdentity{}, errors.New("no peer")
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
			return ads.WorkloadIdentity{}, errors.New("no verified client certificate")
		}
		leaf := info.State.VerifiedChains[0][0]
		if len(leaf.URIs) != 1 {
			return ads.WorkloadIdentity{}, fmt.Errorf("client certificate has %d URI SANs, want one SPIFFE ID", len(leaf.URIs))
		}
		id, err := spiffeid.ParseWorkloadID(leaf.URIs[0].String())
		if err != nil {
			return ads.WorkloadIdentity{}, err
		}
		td, _ := trust()
		if id.TrustDomain != td {
			return ads.WorkloadIdentity{}, fmt.Errorf("client certificate %s is not of trust domain %q (mesh %s)", id, td, mesh)
		}
		ns, sa, _ := id.Workload()
		return ads.WorkloadIdentity{Mesh: mesh, Namespace: ns, ServiceAccount: sa, Name: id.String()}, nil
	})
}
