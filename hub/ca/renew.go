package ca

import (
	"crypto/x509"
	"time"

	"github.com/navemesh/nave/shared/renewal"
)

// Renewal is when the hub renews the certificates it mints for itself and
// hands out (its serving and replica certificates, SDS workload
// certificates): after 80 % of their lifetime, without jitter — a renewal
// is a local mint on the handshake or timer that finds it due, so there is
// no herd to spread (shared/renewal).
var Renewal = renewal.Policy{Fraction: 0.8}

// RenewAt returns when to renew cert under Renewal.
func RenewAt(cert *x509.Certificate) time.Time { return Renewal.At(cert.NotBefore, cert.NotAfter) }
