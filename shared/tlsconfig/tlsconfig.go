// Package tlsconfig builds every tls.Config of nave, one function per
// role, so that the minimum version and the verification are decided
// once:
//
//   - TLS 1.3 where nave is on both ends: a spoke and the hub (sync,
//     enrollment, renewal, polled mode both ways), hub replicas on the
//     relay, nave-agent and the spoke's RA, navectl and the hub's operator
//     listener. Every client is nave's own, so every client asks for 1.3.
//   - TLS 1.3 for the admission webhook: its only client is the
//     kube-apiserver, a Go program that has spoken 1.3 since Go 1.12
//     (Kubernetes 1.14, 2019).
//   - TLS 1.2 at least where a foreign peer connects: the hub's listener
//     (Envoy, whose upstream TLS defaults to at most 1.2, proxyless gRPC
//     clients and Istio agents of other languages; the operator listener
//     shares its configuration, so browsers and Prometheus scrapers with
//     an operator certificate get 1.2 there too), the spoke's fallback
//     xDS listener (the same proxies), and the spoke's RA (Istio agents
//     and gRPC applications calling Istio's CA API).
//
// The one hand-built configuration left is nave-agent's probe client
// (spoke/agent/appprobes.go), which, like the kubelet's HTTPS probes,
// verifies nothing.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// errNoVerify fails the handshakes of a VerifyingClient given nothing to
// verify with.
var errNoVerify = errors.New("tlsconfig: no verification for the server's certificate")

// Peer is who connects to a server: it decides the minimum version. A
// plain value.
type Peer int

const (
	// Ours: every client is nave's own (TLS 1.3).
	Ours Peer = iota
	// Foreign: clients nave does not build connect too (TLS 1.2).
	Foreign
)

// minVersion is the lowest version a server accepts from peer.
func (p Peer) minVersion() uint16 {
	if p == Foreign {
		return tls.VersionTLS12
	}
	return tls.VersionTLS13
}

// Certificate returns the certificate to present now: a renewing holder's
// newest. It is called for every handshake, from any goroutine, so it must
// be safe for concurrent use. nave serves one certificate per listener,
// whatever the client hello says.
type Certificate func() (*tls.Certificate, error)

// Static presents c, always.
func Static(c tls.Certificate) Certificate {
	return func() (*tls.Certificate, error) { return &c, nil }
}

// Server serves cert to peer and asks for no client certificate.
func Server(peer Peer, cert Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:     peer.minVersion(),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert() },
	}
}

// MutualServer serves cert to peer and asks for a client certificate as
// auth says: verified against clientCAs (tls.RequireAndVerifyClientCert),
// or left to the caller (tls.RequestClientCert, tls.RequireAnyClientCert:
// set VerifyConnection, or verify in the service).
func MutualServer(peer Peer, cert Certificate, auth tls.ClientAuthType, clientCAs *x509.CertPool) *tls.Config {
	c := Server(peer, cert)
	c.ClientAuth, c.ClientCAs = auth, clientCAs
	return c
}

// Client dials a server of nave's that presents a certificate for
// serverName ("" is the dialled host) chaining to roots.
func Client(roots *x509.CertPool, serverName string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: serverName}
}

// MutualClient is Client presenting cert when the server asks; a nil cert
// presents none.
func MutualClient(roots *x509.CertPool, serverName string, cert Certificate) *tls.Config {
	c := Client(roots, serverName)
	c.GetClientCertificate = clientCert(cert)
	return c
}

// VerifyingClient dials a server of nave's whose certificate the standard
// verification cannot check — it has no name to dial it by (a replica, a
// polled spoke, the RA), or its CA is known by a pin only — so verify
// checks the whole connection instead; it must verify the chain. It
// presents cert when the server asks (nil: none).
func VerifyingClient(verify func(tls.ConnectionState) error, cert Certificate) *tls.Config {
	if verify == nil {
		verify = func(tls.ConnectionState) error { return errNoVerify }
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		InsecureSkipVerify:   true, //nolint:gosec // verify checks the chain, in VerifyConnection
		VerifyConnection:     verify,
		GetClientCertificate: clientCert(cert),
	}
}

// clientCert adapts cert to tls.Config.GetClientCertificate; nil presents
// no certificate.
func clientCert(cert Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if cert == nil {
		return nil
	}
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert() }
}
