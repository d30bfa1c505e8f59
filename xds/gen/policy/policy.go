// Package policy holds what Istio's policy resources mean, apart from any
// one proxy or xDS flavour: which PeerAuthentication, AuthorizationPolicy
// and RequestAuthentication apply to a workload and what they become
// (an mTLS mode, Envoy RBAC, jwt_authn), and how a DestinationRule's
// traffic policies merge for one port and subset. Envoy and proxyless
// gRPC generation both build on it.
//
// Everything here is a pure function of its arguments (the snapshot it
// reads is immutable), safe to call from any number of goroutines.
// Problems go to a report callback, which may be nil where noted.
package policy

import (
	"github.com/navemesh/nave/xds/mesh"
)

// spiffePrefix is how peer identities start: principals in policies are
// written without it (Istio's form: TRUST_DOMAIN/ns/NS/sa/SA).
const spiffePrefix = "spiffe://"

// TrustDomain is the snapshot's trust domain (mesh.DefaultTrustDomain when
// the snapshot was not made by mesh.Build).
func TrustDomain(s *mesh.Snapshot) string {
	if s.TrustDomain == "" {
		return mesh.DefaultTrustDomain
	}
	return s.TrustDomain
}

// IdentityPrefix is what every workload identity of the snapshot's trust
// domain starts with: "spiffe://TRUST_DOMAIN/".
func IdentityPrefix(s *mesh.Snapshot) string {
	return spiffePrefix + TrustDomain(s) + "/"
}

// IdentityPrefixes are what the workload identities the mesh accepts as
// its own start with: IdentityPrefix, then one per trust domain alias
// (mesh.Snapshot.TrustDomainAliases).
func IdentityPrefixes(s *mesh.Snapshot) []string {
	out := []string{IdentityPrefix(s)}
	for _, td := range s.TrustDomainAliases() {
		out = append(out, spiffePrefix+td+"/")
	}
	return out
}

// Target is the RBACTarget of the snapshot's trust domain and aliases.
func Target(s *mesh.Snapshot) RBACTarget {
	return RBACTarget{TrustDomain: TrustDomain(s), TrustDomainAliases: s.TrustDomainAliases()}
}
