package enroll

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/navemesh/nave/shared/atomicfile"
	"github.com/navemesh/nave/shared/spiffeid"
)

// Files of the state dir.
const (
	// credentialsFile holds the private key, then the certificate chain
	// (mode 0600): one file, replaced atomically, so that key and
	// certificate always match.
	credentialsFile = "credentials.pem"
	// hubCAFile holds the roots the hub's serving certificate verifies
	// against (learnt at enrollment).
	hubCAFile = "hub-ca.pem"
	// trustBundleFile holds the mesh CA's roots, when the hub sent them.
	trustBundleFile = "trust-bundle.pem"
	// identityFile says which (mesh, cluster) the credentials are for.
	identityFile = "identity.json"
)

// Credentials are what enrollment gives a spoke: a client certificate
// bound to one (mesh, cluster), and the roots it trusts the hub by. They
// are immutable once built.
type Credentials struct {
	Mesh        string
	Cluster     string
	TrustDomain string
	// Certificate is the key and chain, with Leaf set.
	Certificate tls.Certificate
	// HubCA is the PEM roots the hub's serving certificate verifies
	// against; HubRoots is the same as a pool.
	HubCA    []byte
	HubRoots *x509.CertPool
	// TrustBundle is the mesh CA's roots as PEM (may be empty).
	TrustBundle []byte
}

type identity struct {
	Mesh        string `json:"mesh"`
	Cluster     string `json:"cluster"`
	TrustDomain string `json:"trustDomain"`
}

// ErrNotEnrolled is Load's error (wrapped) for a state dir without
// credentials: a missing dir, or one an enrollment did not complete.
var ErrNotEnrolled = errors.New("not enrolled")

// Load reads credentials from a state dir that Enroll wrote. Without
// credentials there, its error wraps ErrNotEnrolled; any other error is a
// state dir that holds credentials it cannot use.
func Load(dir string) (*Credentials, error) {
	where := "state dir " + dir
	// The credentials are written last (see save): without them the
	// state dir is not enrolled, whatever else it holds.
	b := map[string][]byte{}
	for _, name := range []string{credentialsFile, identityFile, hubCAFile, trustBundleFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist) && name == credentialsFile:
			return nil, fmt.Errorf("%s: %w (no %s)", where, ErrNotEnrolled, credentialsFile)
		case errors.Is(err, fs.ErrNotExist) && name == trustBundleFile:
		case err != nil:
			return nil, err
		}
		b[name] = data
	}
	return fromBlobs(b, where)
}

// newCredentials checks that the parts fit together.
func newCredentials(id identity, cert tls.Certificate, hubCA, bundle []byte) (*Credentials, error) {
	if !spiffeid.ValidName(id.Mesh) || !spiffeid.ValidName(id.Cluster) {
		return nil, fmt.Errorf("identity %s/%s: not DNS labels", id.Mesh, id.Cluster)
	}
	if cert.Leaf == nil {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return nil, err
		}
		cert.Leaf = leaf
	}
	td, cluster, err := spiffeid.FromCertificate(cert.Leaf)
	if err != nil {
		return nil, err
	}
	if cluster != id.Cluster || (id.TrustDomain != "" && td != id.TrustDomain) {
		return nil, fmt.Errorf("certificate is for %s/%s, want %s/%s", td, cluster, id.TrustDomain, id.Cluster)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(hubCA) {
		return nil, errors.New("no hub CA certificate")
	}
	return &Credentials{Mesh: id.Mesh, Cluster: id.Cluster, TrustDomain: td, Certificate: cert,
		HubCA: hubCA, HubRoots: roots, TrustBundle: bundle}, nil
}

// save writes c to dir: the identity, the roots, then the credentials
// last, so a state dir with credentials is complete.
func (c *Credentials) save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	b, err := c.blobs()
	if err != nil {
		return err
	}
	for _, name := range []string{identityFile, hubCAFile, trustBundleFile, credentialsFile} {
		data, ok := b[name]
		if !ok {
			continue
		}
		perm := os.FileMode(0o644)
		if name == credentialsFile {
			perm = 0o600
		}
		if err := atomicfile.Write(filepath.Join(dir, name), data, perm); err != nil {
			return err
		}
	}
	return nil
}
