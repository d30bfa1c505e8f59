package certreq

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// ImpersonatedIdentityKey is the field of an IstioCertificateRequest's
// metadata naming the identity a trusted agent asks for on a workload's
// behalf (Istio's own key).
const ImpersonatedIdentityKey = "ImpersonatedIdentity"

// MaxSize is the largest CSR, in PEM bytes, that Parse reads. A
// workload CSR is well under 2 KiB.
const MaxSize = 64 << 10

// minRSABits is the smallest RSA modulus allowed in a CSR.
const minRSABits = 2048

const csrBlockType = "CERTIFICATE REQUEST"

// Parse parses a PEM-encoded PKCS #10 certificate signing request
// strictly: at most MaxSize bytes (checked before anything is parsed);
// exactly one "CERTIFICATE REQUEST" block, without PEM headers, and nothing
// but white space around it; DER without trailing bytes; a signature that
// verifies with the request's own key; and a key that is ECDSA P-256 or
// P-384, RSA of at least 2048 bits, or Ed25519.
//
// It checks form, not permission: which SANs the request may carry is
// Sign's business. Every error is a *RefusalError (ReasonInvalidCSR or
// ReasonKeyNotAllowed) whose message starts with "csr: ".
func Parse(data []byte) (*x509.CertificateRequest, error) {
	if len(data) > MaxSize {
		return nil, Refuse(ReasonInvalidCSR, "csr: %d bytes: larger than the %d allowed", len(data), MaxSize)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, Refuse(ReasonInvalidCSR, "csr: is empty")
	}
	if !bytes.HasPrefix(trimmed, []byte("-----BEGIN ")) {
		return nil, Refuse(ReasonInvalidCSR, "csr: does not start with a PEM block")
	}
	block, rest := pem.Decode(trimmed)
	if block == nil {
		return nil, Refuse(ReasonInvalidCSR, "csr: is not valid PEM")
	}
	if block.Type != csrBlockType {
		return nil, Refuse(ReasonInvalidCSR, "csr: PEM block is %q, want %q", block.Type, csrBlockType)
	}
	if len(block.Headers) != 0 {
		return nil, Refuse(ReasonInvalidCSR, "csr: PEM block has headers; want none")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		if next, _ := pem.Decode(rest); next != nil {
			return nil, Refuse(ReasonInvalidCSR, "csr: has a second PEM block (%q); want exactly one", next.Type)
		}
		return nil, Refuse(ReasonInvalidCSR, "csr: has %d bytes after its PEM block; want none", len(bytes.TrimSpace(rest)))
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, Refuse(ReasonInvalidCSR, "csr: not a valid PKCS #10 request: %v", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, Refuse(ReasonInvalidCSR, "csr: signature does not verify: %v", err)
	}
	if err := checkPublicKey(csr.PublicKey); err != nil {
		return nil, &RefusalError{Reason: ReasonKeyNotAllowed, Err: fmt.Errorf("csr: %w", err)}
	}
	return csr, nil
}

// checkPublicKey allows ECDSA P-256 and P-384, RSA of at least 2048 bits
// and Ed25519.
func checkPublicKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384():
			return nil
		}
		return fmt.Errorf("ECDSA key on curve %s is not allowed; use P-256 or P-384", k.Curve.Params().Name)
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < minRSABits {
			return fmt.Errorf("RSA key of %d bits is not allowed; use at least %d", n, minRSABits)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	default:
		return fmt.Errorf("%T key is not allowed; use ECDSA P-256/P-384, RSA >= %d bits or Ed25519", pub, minRSABits)
	}
}
