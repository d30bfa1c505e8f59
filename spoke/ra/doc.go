// Package ra makes the spoke the registration authority (RA) for its
// cluster's workload certificates.
//
// A workload (an Istio agent, or a grpc-go application) calls the spoke with
// Istio's CA API, istio.v1.auth.IstioCertificateService/CreateCertificate,
// sending its Kubernetes service-account token as gRPC metadata
// "authorization: Bearer <token>", as Istio's agents do. For each request
// the Server:
//
//  1. reviews the token with its own cluster's API server (a TokenReview for
//     the configured audiences, by default Istio's "istio-ca"); the token must
//     be authenticated for one of those audiences and name a service account,
//     system:serviceaccount:<namespace>:<name>;
//  2. parses the CSR strictly (hub/csr.Parse) and requires that its only
//     SAN be the URI spiffe://<trust domain>/ns/<namespace>/sa/<name> of the
//     reviewed service account;
//  3. forwards it to the hub's CA over the spoke's mTLS connection (its
//     cluster certificate), naming the workload identity in the request's
//     metadata field ImpersonatedIdentity, and returns the hub's answer
//     unchanged.
//
// Nothing reaches the hub before both checks pass. Every refusal returns a
// gRPC status whose message says why, logs one audit line and counts
// nave_spoke_ra_refusals_total{reason} (see Reason). The token is never
// logged, counted or forwarded.
//
// Hub-side contract: the hub authorizes a caller presenting a valid cluster
// certificate of mesh M (verified against M's roots, enrolled, not revoked)
// to obtain exactly the identity named by the request's ImpersonatedIdentity
// metadata, and only if it is a workload ID, spiffe://<td>/ns/<ns>/sa/<sa>,
// in M's trust domain; the CSR's only URI SAN must be that identity. This is
// hub/enroll.SpokeRAAuthorizer.
package ra
