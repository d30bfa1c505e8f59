package enroll

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/spiffeid"
)

// SpokeRAAuthorizer is the hub CA's Authorizer for spokes acting as their
// cluster's registration authority: a caller presenting a cluster
// certificate (checked by Auth: verified against its mesh's roots, enrolled,
// not revoked) may obtain exactly the workload identity its request names as
// ImpersonatedIdentity (see ca.Impersonated), and only in its own mesh's
// trust domain. The spoke has checked the workload's service-account token
// with its own API server before asking. A cluster enrolled with a token
// scoped to namespaces (ClusterRecord.Namespaces, as authentication read it)
// obtains identities of those namespaces only. A caller whose certificate is not a
// cluster certificate is passed to Next (a workload renewing its own
// certificate, ca.PeerCertificateAuthorizer).
//
// Safe for concurrent use.
type SpokeRAAuthorizer struct {
	Auth   *CertAuthenticator
	Signer Signer
	Next   ca.Authorizer
}

// Authorize implements ca.Authorizer.
func (a SpokeRAAuthorizer) Authorize(ctx context.Context) (ca.Grant, error) {
	if !presentsClusterID(ctx) {
		return a.Next.Authorize(ctx)
	}
	rec, err := a.Auth.AuthenticateCluster(ctx)
	if err != nil {
		return ca.Grant{}, err
	}
	id := rec.Identity()
	caller := "cluster " + id.String()
	want, ok := ca.Impersonated(ctx)
	if !ok {
		return ca.Grant{}, &certreq.RefusalError{Reason: certreq.ReasonIdentityNotAllowed, Err: fmt.Errorf(
			"%s: a spoke obtains certificates only for its workloads, named by the request's %s metadata", caller, certreq.ImpersonatedIdentityKey)}
	}
	wid, err := spiffeid.ParseWorkloadID(want)
	if err != nil {
		return ca.Grant{}, &certreq.RefusalError{Reason: certreq.ReasonIdentityNotAllowed, Err: fmt.Errorf("%s: %s %q: %v", caller, certreq.ImpersonatedIdentityKey, want, err)}
	}
	td, err := a.Signer.TrustDomain(id.Mesh)
	if err != nil {
		return ca.Grant{}, err
	}
	if wid.TrustDomain != td {
		return ca.Grant{}, &certreq.RefusalError{Reason: certreq.ReasonIdentityNotAllowed, Err: fmt.Errorf(
			"%s: %s %s is not in mesh %q's trust domain %q", caller, certreq.ImpersonatedIdentityKey, wid, id.Mesh, td)}
	}
	ns, _, _ := wid.Workload()
	if len(rec.Namespaces) > 0 && !slices.Contains(rec.Namespaces, ns) {
		return ca.Grant{}, &certreq.RefusalError{Reason: certreq.ReasonIdentityNotAllowed, Err: fmt.Errorf(
			"%s: %s %s: namespace %q is outside the cluster's scope (%s), set by its join token", caller, certreq.ImpersonatedIdentityKey, wid, ns, strings.Join(rec.Namespaces, ", "))}
	}
	return ca.Grant{Mesh: id.Mesh, Identities: []ca.ID{wid}, Caller: caller + " for " + wid.String()}, nil
}

// presentsClusterID reports whether the caller's TLS leaf names a cluster
// (spiffe://<td>/nave/cluster/<name>), as a spoke's certificate does. It
// decides only which authorizer checks the caller, never whether to trust it.
func presentsClusterID(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return false
	}
	_, _, err := spiffeid.FromCertificate(ti.State.PeerCertificates[0])
	return err == nil
}
