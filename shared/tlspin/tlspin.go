// Package tlspin trusts a server by a pin of its CA before any root of
// trust is installed: the pin is "sha256:" and the hex SHA-256 of the CA
// certificate's SubjectPublicKeyInfo (the form kubeadm's
// --discovery-token-ca-cert-hash uses). A spoke's first contact with the
// hub uses it; `navectl ca-hash` prints it.
//
// Everything here is stateless and safe for concurrent use.
package tlspin

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// Hash is the pin of cert.
func Hash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// HashesPEM are the pins of the CA certificates in a PEM bundle, in order;
// other blocks and non-CA certificates are skipped. An unparseable
// certificate is an error.
func HashesPEM(bundle []byte) ([]string, error) {
	var out []string
	for rest := bundle; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		if c.IsCA {
			out = append(out, Hash(c))
		}
	}
}

// Parse checks the form of a pin and returns it in lowercase.
func Parse(s string) (string, error) {
	h, ok := strings.CutPrefix(strings.ToLower(s), "sha256:")
	if b, err := hex.DecodeString(h); !ok || err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("CA hash %q: want sha256:<64 hex digits>", s)
	}
	return "sha256:" + h, nil
}

// Verify returns the certificate of a server's chain (leaf first) whose
// public key has the pin, once the leaf verifies against it, as the only
// root, for serverName and server authentication. The server must send
// the pinned CA in its chain.
func Verify(chain []*x509.Certificate, serverName, pin string) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, errors.New("the server presented no certificate")
	}
	for _, c := range chain {
		if Hash(c) != pin {
			continue
		}
		roots := x509.NewCertPool()
		roots.AddCert(c)
		inter := x509.NewCertPool()
		for _, i := range chain[1:] {
			inter.AddCert(i)
		}
		if _, err := chain[0].Verify(x509.VerifyOptions{DNSName: serverName, Roots: roots, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return nil, fmt.Errorf("the server's certificate does not verify against its CA pinned by %s: %w", pin, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("no certificate the server presented matches the CA hash %s (the server must send its CA certificate in its chain)", pin)
}
