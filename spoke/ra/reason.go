package ra

import "google.golang.org/grpc/codes"

// Reason classifies why the RA refused a request. The set is closed: it is
// the label set of nave_spoke_ra_refusals_total, every value exported from
// the start.
type Reason string

const (
	// ReasonMissingToken: no "authorization" metadata (Unauthenticated).
	ReasonMissingToken Reason = "missing_token"
	// ReasonMalformedToken: the metadata is not exactly one
	// "Bearer <token>" value of an acceptable form and size
	// (Unauthenticated).
	ReasonMalformedToken Reason = "malformed_token"
	// ReasonInvalidToken: the API server did not authenticate the token
	// (garbage, expired, wrong audience, deleted service account or pod)
	// (Unauthenticated).
	ReasonInvalidToken Reason = "invalid_token"
	// ReasonWrongAudience: the API server authenticated the token but for
	// none of the RA's audiences (Unauthenticated).
	ReasonWrongAudience Reason = "wrong_audience"
	// ReasonNotServiceAccount: the token authenticates someone who is not
	// a service account, system:serviceaccount:<namespace>:<name>, such as
	// a user (Unauthenticated).
	ReasonNotServiceAccount Reason = "not_service_account"
	// ReasonReviewUnavailable: the TokenReview failed (the API server is
	// unreachable, timed out, or refused the spoke) (Unavailable).
	ReasonReviewUnavailable Reason = "review_unavailable"
	// ReasonInvalidCSR: the CSR is malformed or its key is not allowed
	// (InvalidArgument).
	ReasonInvalidCSR Reason = "invalid_csr"
	// ReasonIdentityMismatch: the CSR asks for something other than exactly
	// the token's workload identity: another service account, namespace or
	// trust domain, a cluster identity, several or no URI SANs, or DNS, IP
	// or email SANs (PermissionDenied).
	ReasonIdentityMismatch Reason = "identity_mismatch"
	// ReasonHubError: the hub refused or failed; its code is passed back
	// and its message prefixed "hub: ".
	ReasonHubError Reason = "hub_error"
)

// Reasons lists every Reason.
var Reasons = []Reason{ReasonMissingToken, ReasonMalformedToken, ReasonInvalidToken, ReasonWrongAudience,
	ReasonNotServiceAccount, ReasonReviewUnavailable, ReasonInvalidCSR, ReasonIdentityMismatch, ReasonHubError}

// code is the gRPC code of a refusal for r (ReasonHubError keeps the hub's).
func (r Reason) code() codes.Code {
	switch r {
	case ReasonMissingToken, ReasonMalformedToken, ReasonInvalidToken, ReasonWrongAudience, ReasonNotServiceAccount:
		return codes.Unauthenticated
	case ReasonReviewUnavailable:
		return codes.Unavailable
	case ReasonInvalidCSR:
		return codes.InvalidArgument
	case ReasonIdentityMismatch:
		return codes.PermissionDenied
	}
	return codes.Internal
}
