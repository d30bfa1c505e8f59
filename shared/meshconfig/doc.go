// Package meshconfig is nave's config model: the Istio kinds it accepts
// (networking.istio.io, security.istio.io) and its own registry kinds
// (nave.io Service and Workload), decoded from YAML into Objects and
// checked by Validate.
//
// The kind table is immutable; every function in the package is safe for
// concurrent use. An Object is a plain value: it is not safe to mutate one
// that another goroutine reads.
package meshconfig
