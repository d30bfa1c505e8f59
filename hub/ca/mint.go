package ca

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
)

// Minted is a key and certificate the Authority made together.
type Minted struct {
	// ChainPEM is the certificate chain, leaf first and root last;
	// KeyPEM the PKCS #8 private key. Leaf is the parsed leaf.
	ChainPEM, KeyPEM []byte
	Leaf             *x509.Certificate
}

// Mint makes a fresh ECDSA P-256 key and a certificate for it in mesh, for
// the first of opts.Identities and all of opts' DNS names and IP addresses:
// for a holder that does not make its own key, such as an Envoy proxy
// served its certificate by SDS, or the hub's own serving certificate. The
// key exists only in the result.
func (a *Authority) Mint(ctx context.Context, mesh string, opts SignOptions) (*Minted, error) {
	if len(opts.Identities) == 0 {
		return nil, errors.New("mint: no identity")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(opts.Identities[0].String())
	if err != nil {
		return nil, fmt.Errorf("mint: %w", err)
	}
	// The request is the Authority's own: it needs no signature to prove
	// the key, so none is made and checked.
	csr := &x509.CertificateRequest{PublicKey: &key.PublicKey, URIs: []*url.URL{u}, DNSNames: opts.DNSNames, IPAddresses: opts.IPAddresses}
	is, err := a.count(mesh, func() (*x509.CertificateRequest, error) { return csr, nil }, opts, requestedSANs(opts))
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("mint: %w", err)
	}
	return &Minted{ChainPEM: bytes.Join(is.chain, nil), KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), Leaf: is.leaf}, nil
}
