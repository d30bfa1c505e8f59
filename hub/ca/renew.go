package ca

import (
	"crypto/x509"
	"math/rand/v2"
	"time"
)

// DefaultRenewFraction is the part of a certificate's lifetime after which
// RenewAt says to renew it.
const DefaultRenewFraction = 0.8

// RenewPolicy says when to renew a certificate: after a fraction of its
// lifetime, optionally made earlier by a random jitter so that many
// workloads issued at once do not all renew at once. The zero value renews
// at 80 % without jitter.
//
// A RenewPolicy is a plain value, safe for concurrent use if Rand is.
type RenewPolicy struct {
	// Fraction of the lifetime (NotBefore to NotAfter) after which to
	// renew, in (0, 1]; zero or out of range means DefaultRenewFraction.
	Fraction float64
	// Jitter, a fraction of the lifetime in [0, Fraction), moves the renewal
	// time earlier by a uniformly random amount up to it: with Fraction 0.8
	// and Jitter 0.1, renewal falls between 70 % and 80 %. Never later, so
	// jitter cannot make a certificate expire unrenewed.
	Jitter float64
	// Rand returns a number in [0, 1); nil means math/rand/v2's Float64.
	Rand func() float64
}

// RenewAt returns when to renew cert. With jitter each call draws anew:
// call it once per certificate and keep the answer.
func (p RenewPolicy) RenewAt(cert *x509.Certificate) time.Time {
	f := p.Fraction
	if f <= 0 || f > 1 {
		f = DefaultRenewFraction
	}
	if j := min(max(p.Jitter, 0), f); j > 0 {
		r := p.Rand
		if r == nil {
			r = rand.Float64
		}
		f -= j * min(max(r(), 0), 1)
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	if life <= 0 {
		return cert.NotBefore
	}
	return cert.NotBefore.Add(time.Duration(float64(life) * f))
}

// RenewAt returns when to renew cert under the default policy: after 80 %
// of its lifetime.
func RenewAt(cert *x509.Certificate) time.Time { return RenewPolicy{}.RenewAt(cert) }

// NeedsRenewal reports whether cert should be renewed at now under the
// default policy: 80 % of its lifetime has passed.
func NeedsRenewal(cert *x509.Certificate, now time.Time) bool { return !now.Before(RenewAt(cert)) }
