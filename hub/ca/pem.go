package ca

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// parseCertsPEM returns the certificates of data, which must hold at least
// one CERTIFICATE block and no block of another type. Text outside blocks
// (the "subject=" lines openssl writes) is ignored.
func parseCertsPEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", n, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return certs, nil
}

// parseKeyPEM returns the private key of data: one PKCS #8 "PRIVATE KEY",
// SEC 1 "EC PRIVATE KEY" or PKCS #1 "RSA PRIVATE KEY" block (an "EC
// PARAMETERS" block, as openssl writes, may stand before it).
func parseKeyPEM(data []byte) (crypto.Signer, error) {
	var key crypto.Signer
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type == "EC PARAMETERS" {
			continue
		}
		if key != nil {
			return nil, fmt.Errorf("PEM block %d: a second key block (%q); want exactly one", n, block.Type)
		}
		if _, encrypted := block.Headers["DEK-Info"]; encrypted || block.Type == "ENCRYPTED PRIVATE KEY" {
			return nil, errors.New("key is encrypted; nave needs it unencrypted (protect the file or Secret instead)")
		}
		var (
			k   any
			err error
		)
		switch block.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			return nil, fmt.Errorf("PEM block %d is %q, want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY", n, block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", block.Type, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%T key cannot sign", k)
		}
		key = s
	}
	if key == nil {
		return nil, errors.New("no private key PEM block")
	}
	return key, nil
}

func encodeCertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// publicKeyMatches reports whether cert's public key is signer's.
func publicKeyMatches(cert *x509.Certificate, signer crypto.Signer) bool {
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(signer.Public())
}
