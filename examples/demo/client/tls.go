package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// The files of a workload certificate directory, as navectl cert issue writes it.
const (
	certChainFile = "cert-chain.pem"
	keyFile       = "key.pem"
	meshRootsFile = "root-cert.pem"
)

// tlsFiles is the config of the "tls" channel credentials of grpc's xDS bootstrap (gRFC
// A65): the CA the server's certificate must chain to, and the client's certificate and
// key. grpc re-reads the files every 10 minutes, so a certificate issued again is picked
// up without a restart.
type tlsFiles = xdsbootstrap.TLSFiles

// loadTLSFiles checks the workload certificate in certDir and the hub CA in caFile before
// grpc gets them (grpc only says that a handshake failed), and returns their absolute
// paths. The certificate's only URI SAN must be a workload SPIFFE ID in namespace: the hub
// refuses a proxy whose node metadata names another namespace than its certificate.
func loadTLSFiles(certDir, caFile, namespace string) (*tlsFiles, error) {
	dir, err := filepath.Abs(certDir)
	if err != nil {
		return nil, fmt.Errorf("--xds-cert-dir %s: %w", certDir, err)
	}
	ca, err := filepath.Abs(caFile)
	if err != nil {
		return nil, fmt.Errorf("--xds-ca-file %s: %w", caFile, err)
	}
	files := &tlsFiles{
		CACertificateFile: ca,
		CertificateFile:   filepath.Join(dir, certChainFile),
		PrivateKeyFile:    filepath.Join(dir, keyFile),
	}
	pair, err := tls.LoadX509KeyPair(files.CertificateFile, files.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--xds-cert-dir %s: %w", certDir, err)
	}
	leaf := pair.Leaf
	if now := time.Now(); now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("--xds-cert-dir %s: the certificate expired at %s (navectl cert issue makes a new one)",
			certDir, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if len(leaf.URIs) != 1 {
		return nil, fmt.Errorf("--xds-cert-dir %s: the certificate has %d URI SANs, want one workload SPIFFE ID", certDir, len(leaf.URIs))
	}
	id, err := spiffeid.ParseWorkloadID(leaf.URIs[0].String())
	if err != nil {
		return nil, fmt.Errorf("--xds-cert-dir %s: %w", certDir, err)
	}
	if ns, _, _ := id.Workload(); ns != namespace {
		return nil, fmt.Errorf("--namespace %s does not match the certificate's namespace %s (%s): the hub refuses a node whose NAMESPACE is not its certificate's",
			namespace, ns, id)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("--xds-ca-file: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--xds-ca-file %s: no PEM certificate", caFile)
	}
	return files, nil
}
