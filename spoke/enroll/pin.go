package enroll

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// CAHash is the pin of a CA certificate: "sha256:" and the hex SHA-256 of
// its SubjectPublicKeyInfo (the form kubeadm's
// --discovery-token-ca-cert-hash uses). `navectl ca-hash` prints it for
// the hub's serving CA.
func CAHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// parsePin checks the form of a CA hash and returns it in lowercase.
func parsePin(s string) (string, error) {
	h, ok := strings.CutPrefix(strings.ToLower(s), "sha256:")
	if b, err := hex.DecodeString(h); !ok || err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("hub CA hash %q: want sha256:<64 hex digits>", s)
	}
	return "sha256:" + h, nil
}

// pinnedTLS is a client configuration for the first contact with the hub,
// before the spoke trusts any root: the hub's chain must contain a
// certificate whose public key has the pinned hash, and the hub's leaf
// must verify against that certificate (as the only root) for serverName.
// The matching certificate is kept in pinned, to be trusted from then on.
func pinnedTLS(serverName, pin string, pinned *atomic.Pointer[x509.Certificate]) *tls.Config {
	return &tls.Config{
		ServerName: serverName,
		MinVersion: tls.VersionTLS13,
		// The standard verification needs roots the spoke does not have
		// yet; VerifyConnection does the whole verification instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			ca, err := verifyPinned(cs.PeerCertificates, serverName, pin)
			if err != nil {
				return err
			}
			pinned.Store(ca)
			return nil
		},
	}
}

// verifyPinned returns the certificate of chain that matches pin, once the
// chain's leaf verifies against it for serverName.
func verifyPinned(chain []*x509.Certificate, serverName, pin string) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, errors.New("the hub presented no certificate")
	}
	for _, c := range chain {
		if CAHash(c) != pin {
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
			return nil, fmt.Errorf("the hub's certificate does not verify against its CA pinned by %s: %w", pin, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("no certificate the hub presented matches the CA hash %s (the hub must send its CA certificate in its chain)", pin)
}
