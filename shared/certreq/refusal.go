package certreq

import (
	"errors"
	"fmt"
)

// Reason classifies why a certificate was refused. The set is closed: it is
// the label set of nave_hub_ca_refusals_total.
type Reason string

const (
	// ReasonInvalidRequest: the request around the CSR is malformed (a
	// negative validity, no mesh).
	ReasonInvalidRequest Reason = "invalid_request"
	// ReasonInvalidCSR: the CSR is too large, not exactly one CERTIFICATE
	// REQUEST PEM block, not parseable, or its signature does not verify.
	ReasonInvalidCSR Reason = "invalid_csr"
	// ReasonKeyNotAllowed: the CSR's public key is of a type or size that is
	// not allowed.
	ReasonKeyNotAllowed Reason = "key_not_allowed"
	// ReasonIdentityNotAllowed: a SAN of the CSR is not an identity the
	// caller may obtain (another trust domain, namespace or service account,
	// or a DNS/IP/email SAN not allowed).
	ReasonIdentityNotAllowed Reason = "identity_not_allowed"
	// ReasonUnauthenticated: the caller presented no credential, or one that
	// does not verify against its mesh's root.
	ReasonUnauthenticated Reason = "unauthenticated"
	// ReasonUnknownMesh: the mesh has no CA loaded.
	ReasonUnknownMesh Reason = "unknown_mesh"
)

// Reasons lists every Reason, for initialising a metric's label values.
var Reasons = []Reason{ReasonInvalidRequest, ReasonInvalidCSR, ReasonKeyNotAllowed,
	ReasonIdentityNotAllowed, ReasonUnauthenticated, ReasonUnknownMesh}

// RefusalError is a refusal to issue a certificate: a caller's mistake or
// lack of permission, not a failure of the CA. Its message says what was
// refused and why.
type RefusalError struct {
	Reason Reason
	Err    error
}

func (e *RefusalError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *RefusalError) Unwrap() error { return e.Err }

// Refuse returns a RefusalError with a formatted message.
func Refuse(r Reason, format string, args ...any) error {
	return &RefusalError{Reason: r, Err: fmt.Errorf(format, args...)}
}

// ReasonOf returns the Reason of the first RefusalError in err's chain, and
// false if err is not a refusal.
func ReasonOf(err error) (Reason, bool) {
	var re *RefusalError
	if errors.As(err, &re) {
		return re.Reason, true
	}
	return "", false
}
