package ca

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/certreq"
)

// Defaults of Options.
const (
	DefaultTTL     = 24 * time.Hour
	DefaultMaxTTL  = 7 * 24 * time.Hour
	DefaultRootTTL = 10 * 365 * 24 * time.Hour
)

// Options configure an Authority. The zero value is usable.
type Options struct {
	// DefaultTTL is the lifetime of a certificate whose request names none.
	// Zero means DefaultTTL (24 h). It is clamped to MaxTTL.
	DefaultTTL time.Duration
	// MaxTTL is the longest lifetime issued; longer requests are shortened
	// to it. Zero means DefaultMaxTTL (7 days).
	MaxTTL time.Duration
	// RootTTL is the lifetime of a root the Authority generates. Zero means
	// DefaultRootTTL (10 years).
	RootTTL time.Duration
	// Now gives the current time; nil means time.Now. Tests set it.
	Now func() time.Time
	// Logger receives the CA's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the CA metrics (nave_hub_ca_*); nil registers
	// nowhere.
	Registerer prometheus.Registerer
	// HubNames are the names the hub's serving certificate is valid for
	// (tls.hosts): no cluster certificate may carry one (SignCluster).
	// A proxyless client with a fallback server trusts the mesh roots for
	// the hub's connection too (grpc-go uses one CA file for all its xDS
	// servers), so a cluster certificate valid for a hub name would let
	// a spoke pass for the hub.
	HubNames []string
}

// Mesh names a mesh and its trust domain: the SPIFFE trust domain every
// identity the mesh's CA issues belongs to.
type Mesh struct {
	Name        string
	TrustDomain string
}

// Authority is the certificate authority of the hub: one root of trust per
// mesh, each kept in a Store, and the signing of workload and spoke
// certificates under it (see Sign). Call Load for each mesh before signing
// for it.
//
// An Authority is safe for concurrent use. Its meshes' CAs are immutable
// once loaded; Sign for different meshes, or the same, runs in parallel.
// Refresh replaces a mesh's CA whole when its blobs changed in the Store (a
// root rotation, rotate.go): a Sign running meanwhile signs with the one
// it started with.
type Authority struct {
	store   Store
	opts    Options
	log     *slog.Logger
	metrics *metrics

	loadMu sync.Mutex // serialises Load

	mu     sync.RWMutex
	meshes map[string]*meshCA // by mesh name
	byTD   map[string]string  // trust domain → mesh name
}

// meshCA is one mesh's loaded CA. It is never changed once built; a
// rotation (Refresh) replaces it whole.
type meshCA struct {
	mesh   Mesh
	source string // sourcePlugged, sourceGenerated or sourceCreated
	signer crypto.Signer
	// path is the signing certificate's chain up to its root, root last;
	// path[0] signs leaves. For a generated root it is just the root.
	path []*x509.Certificate
	// pathPEM is path PEM-encoded, one entry per certificate.
	pathPEM [][]byte
	// notAfter is the earliest NotAfter of path: no leaf outlives it.
	notAfter time.Time
	roots    *x509.CertPool
	rootsPEM []byte
	// rootCerts are the roots of roots, in the order of rootsPEM: the
	// signing CA's, then a new one being added, then previous ones.
	rootCerts []*x509.Certificate
	// rotation is the state of a root rotation (rotate.go).
	rotation rotation
	// blobsSum is the hash of the blobs the CA was built from: Refresh
	// rebuilds the CA when the store's differ.
	blobsSum [32]byte
}

const (
	sourcePlugged   = "plugged-in"
	sourceGenerated = "generated"
	sourceCreated   = "created"
)

// New returns an Authority keeping its meshes' CAs in store. It returns an
// error if opts are not valid.
func New(store Store, opts Options) (*Authority, error) {
	if store == nil {
		return nil, fmt.Errorf("ca: store is nil")
	}
	for _, o := range []struct {
		name string
		d    time.Duration
	}{{"DefaultTTL", opts.DefaultTTL}, {"MaxTTL", opts.MaxTTL}, {"RootTTL", opts.RootTTL}} {
		if o.d < 0 {
			return nil, fmt.Errorf("ca: options: %s is negative (%s)", o.name, o.d)
		}
	}
	if opts.MaxTTL == 0 {
		opts.MaxTTL = DefaultMaxTTL
	}
	if opts.DefaultTTL == 0 {
		opts.DefaultTTL = DefaultTTL
	}
	opts.DefaultTTL = min(opts.DefaultTTL, opts.MaxTTL)
	if opts.RootTTL == 0 {
		opts.RootTTL = DefaultRootTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Authority{
		store:   store,
		opts:    opts,
		log:     opts.Logger,
		metrics: newMetrics(opts.Registerer),
		meshes:  map[string]*meshCA{},
		byTD:    map[string]string{},
	}, nil
}

// Load makes m's CA ready to sign, from the Store:
//
//   - a plugged-in CA (Istio's cacerts: ca-cert.pem, ca-key.pem,
//     cert-chain.pem, root-cert.pem) is used as an intermediate, after
//     checking that ca-cert.pem is a CA whose key is ca-key.pem and that it
//     chains to root-cert.pem through cert-chain.pem;
//   - else a root generated earlier (root-cert.pem, root-key.pem) is used;
//   - else a root is generated (ECDSA P-256, Options.RootTTL) and stored.
//     When several Authorities race to create it, one wins and all use it.
//
// Loading a mesh already loaded with the same trust domain does nothing;
// with another trust domain, or with a trust domain another mesh has, it is
// an error. Any refusal names the file and why.
func (a *Authority) Load(ctx context.Context, m Mesh) error {
	if err := validateLabel(m.Name); err != nil {
		return fmt.Errorf("ca: mesh name %q: %w", m.Name, err)
	}
	if err := ValidateTrustDomain(m.TrustDomain); err != nil {
		return fmt.Errorf("ca: mesh %q: %w", m.Name, err)
	}
	a.loadMu.Lock()
	defer a.loadMu.Unlock()
	a.mu.RLock()
	cur, loaded := a.meshes[m.Name]
	other, taken := a.byTD[m.TrustDomain]
	a.mu.RUnlock()
	switch {
	case loaded && cur.mesh.TrustDomain == m.TrustDomain:
		return nil
	case loaded:
		return fmt.Errorf("ca: mesh %q is loaded with trust domain %q; cannot change it to %q", m.Name, cur.mesh.TrustDomain, m.TrustDomain)
	case taken:
		return fmt.Errorf("ca: mesh %q: trust domain %q is mesh %q's; each mesh needs its own", m.Name, m.TrustDomain, other)
	}

	c, err := a.loadCA(ctx, m)
	if err != nil {
		if l, ok := a.store.(Locator); ok {
			return fmt.Errorf("ca: mesh %q (%s): %w", m.Name, l.Location(m.Name), err)
		}
		return fmt.Errorf("ca: mesh %q: %w", m.Name, err)
	}
	a.mu.Lock()
	a.meshes[m.Name] = c
	a.byTD[m.TrustDomain] = m.Name
	a.mu.Unlock()
	a.metrics.setCA(c, a.opts.MaxTTL)
	root := c.path[len(c.path)-1]
	a.log.Info("ca loaded", "mesh", m.Name, "trust_domain", m.TrustDomain, "source", c.source,
		"signer", c.path[0].Subject.String(), "root_sha256", fingerprint(root),
		"not_after", c.notAfter.UTC().Format(time.RFC3339), "roots", len(c.rootCerts), "rotation", c.rotation.phase())
	return nil
}

// Meshes returns the loaded meshes, sorted by name.
func (a *Authority) Meshes() []Mesh {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]Mesh, 0, len(a.meshes))
	for _, c := range a.meshes {
		out = append(out, c.mesh)
	}
	slices.SortFunc(out, func(x, y Mesh) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// MeshOf returns the loaded mesh whose trust domain is td.
func (a *Authority) MeshOf(td string) (Mesh, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	name, ok := a.byTD[td]
	if !ok {
		return Mesh{}, false
	}
	return a.meshes[name].mesh, true
}

// TrustDomain returns mesh's trust domain.
func (a *Authority) TrustDomain(mesh string) (string, error) {
	c, err := a.ca(mesh)
	if err != nil {
		return "", err
	}
	return c.mesh.TrustDomain, nil
}

// Roots returns a pool of mesh's roots, to verify its certificates with.
// The pool is the caller's to change.
func (a *Authority) Roots(mesh string) (*x509.CertPool, error) {
	c, err := a.ca(mesh)
	if err != nil {
		return nil, err
	}
	return c.roots.Clone(), nil
}

// RootsPEM returns mesh's roots as a PEM bundle, for distribution to
// proxies and spokes: the signing CA's roots (with a plugged-in CA,
// root-cert.pem's certificates), and during a rotation the new or the
// previous root (rotate.go).
func (a *Authority) RootsPEM(mesh string) ([]byte, error) {
	c, err := a.ca(mesh)
	if err != nil {
		return nil, err
	}
	return slices.Clone(c.rootsPEM), nil
}

func (a *Authority) ca(mesh string) (*meshCA, error) {
	a.mu.RLock()
	c, ok := a.meshes[mesh]
	a.mu.RUnlock()
	if !ok {
		return nil, certreq.Refuse(certreq.ReasonUnknownMesh, "mesh %q has no CA loaded", mesh)
	}
	return c, nil
}

// fingerprint is the hex SHA-256 of a certificate's DER.
func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}
