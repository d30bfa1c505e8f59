// Package admission is the spoke's Kubernetes admission webhook server:
// admission.k8s.io/v1 AdmissionReviews over HTTPS on a listener of its own
// (webhook.listen), one Reviewer per path. The validation webhook
// (/validate, Validator) checks the Istio kinds the spoke reads with the
// same decoder and validator as the file source and the hub
// (shared/meshconfig): an invalid object is denied with the field and the
// reason, and what is valid but suspicious comes back as warnings. A
// sidecar-injection Reviewer can be added on another path of the same
// Server.
//
// The serving certificate comes from a func the caller gives Serve
// (spoke/webhookcert keeps it current). Bad requests — another method or
// content type, an oversized, truncated or malformed body, a review
// without a request or uid — are answered with a 4xx status and a message
// that says why; a Reviewer that panics is answered with a 500; the server
// goes on serving either way.
package admission
