// Package enroll is the spoke's side of enrollment: it trades a one-time
// join token for a client certificate bound to the spoke's (mesh,
// cluster), keeps the key and certificate in a state dir, and renews the
// certificate before it expires, handing the current one to every new TLS
// connection (Renewer.GetClientCertificate) without a restart.
//
// First contact needs a way to trust the hub before the spoke has any
// certificate: either the hub's serving CA itself (Options.HubCA) or a pin
// of it (Options.HubCAHash, "sha256:<hex of the CA's SubjectPublicKeyInfo>",
// printed by `navectl ca-hash`), so that a join token is never sent to a
// server that is not the hub. After enrollment the CA that matched is kept
// in the state dir and trusted from then on.
package enroll

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/shared/tlsconfig"
	"github.com/navemesh/nave/shared/tlspin"
)

// Options say where the hub is, how to trust it at first contact, and
// where to keep the credentials.
type Options struct {
	// Address is the hub's spoke listener, host:port.
	Address string
	// ServerName the hub's certificate must be valid for; "" is
	// Address's host.
	ServerName string
	// HubCA is the PEM roots of the hub's serving certificate. Either it
	// or HubCAHash is required.
	HubCA []byte
	// HubCAHash pins the hub's serving CA: "sha256:" and the hex SHA-256
	// of its SubjectPublicKeyInfo. The hub must present that CA in its
	// certificate chain.
	HubCAHash string
	// StateDir receives the credentials (created 0700 if missing), unless
	// Store is set.
	StateDir string
	// Store receives the credentials instead of StateDir.
	Store Store
	// ServerNames are the host names or IP addresses proxies dial the
	// spoke's fallback xDS server by: the request asks for them, so that
	// the cluster certificate it serves with is valid for them.
	ServerNames []string
}

// store is where the credentials go: Store, else StateDir.
func (o Options) store() Store {
	switch {
	case o.Store != nil:
		return o.Store
	case o.StateDir != "":
		return DirStore(o.StateDir)
	}
	return nil
}

func (o Options) serverName() (string, error) {
	if o.ServerName != "" {
		return o.ServerName, nil
	}
	host, _, err := net.SplitHostPort(o.Address)
	if err != nil {
		return "", fmt.Errorf("hub address %q: %w", o.Address, err)
	}
	return host, nil
}

// Enroll redeems token at the hub and saves the credentials it gets in
// opts' store, replacing any there. The token is not kept anywhere.
func Enroll(ctx context.Context, opts Options, token string) (*Credentials, error) {
	store := opts.store()
	if opts.Address == "" || store == nil {
		return nil, errors.New("enroll: hub address and a state dir or store are required")
	}
	if !strings.HasPrefix(token, "nave-join.") {
		return nil, errors.New("enroll: not a join token (they start with nave-join.)")
	}
	serverName, err := opts.serverName()
	if err != nil {
		return nil, err
	}
	var tlsConf *tls.Config
	var pinned atomic.Pointer[x509.Certificate]
	switch {
	case len(opts.HubCA) > 0:
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(opts.HubCA) {
			return nil, errors.New("enroll: hub CA holds no PEM certificate")
		}
		tlsConf = tlsconfig.Client(roots, serverName)
	case opts.HubCAHash != "":
		pin, err := tlspin.Parse(opts.HubCAHash)
		if err != nil {
			return nil, err
		}
		tlsConf = pinnedTLS(serverName, pin, &pinned)
	default:
		return nil, errors.New("enroll: the hub's CA or its hash is required to trust the hub")
	}

	key, csr, err := newKey(opts.ServerNames)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(opts.Address, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	defer conn.Close()
	resp, err := protocolv1.NewEnrollmentClient(conn).Enroll(ctx, &protocolv1.EnrollRequest{Token: token, CsrPem: csr})
	if err != nil {
		return nil, fmt.Errorf("enroll at %s: %w", opts.Address, err)
	}
	cert, td, err := checkIssued(resp.GetCertChainPem(), key, resp.GetTrustBundlePem())
	if err != nil {
		return nil, fmt.Errorf("enroll: the hub's answer: %w", err)
	}
	hubCA := opts.HubCA
	if ca := pinned.Load(); ca != nil {
		hubCA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	}
	creds, err := newCredentials(identity{Mesh: resp.GetMesh(), Cluster: resp.GetCluster(), TrustDomain: td},
		cert, hubCA, resp.GetTrustBundlePem())
	if err != nil {
		return nil, fmt.Errorf("enroll: the hub's answer: %w", err)
	}
	if err := store.Save(ctx, creds); err != nil {
		return nil, fmt.Errorf("enroll: saving the credentials in the %s: %w", store, err)
	}
	return creds, nil
}

// newKey returns a fresh ECDSA P-256 key and a PEM certificate request for
// it. The request names no identity (the hub decides it), only names,
// the fallback server's host names and IP addresses.
func newKey(names []string) (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.CertificateRequest{}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// checkIssued parses an issued chain for key: the leaf must hold key's
// public key and a cluster SPIFFE ID, and verify for client
// authentication against bundle when the hub sent one.
func checkIssued(chainPEM []byte, key crypto.Signer, bundle []byte) (tls.Certificate, string, error) {
	cert := tls.Certificate{PrivateKey: key}
	for rest := chainPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			cert.Certificate = append(cert.Certificate, block.Bytes)
		}
	}
	if len(cert.Certificate) == 0 {
		return cert, "", errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return cert, "", err
	}
	cert.Leaf = leaf
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if k, ok := leaf.PublicKey.(equaler); !ok || !k.Equal(key.Public()) {
		return cert, "", errors.New("the certificate is not for our key")
	}
	td, _, err := spiffeid.FromCertificate(leaf)
	if err != nil {
		return cert, "", err
	}
	if len(bundle) > 0 {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(bundle) {
			return cert, "", errors.New("trust bundle holds no certificate")
		}
		inter := x509.NewCertPool()
		for _, der := range cert.Certificate[1:] {
			if c, err := x509.ParseCertificate(der); err == nil {
				inter.AddCert(c)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			return cert, "", fmt.Errorf("the certificate does not verify against the mesh's trust bundle: %w", err)
		}
	}
	return cert, td, nil
}
