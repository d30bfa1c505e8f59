package ca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// loadCA builds m's CA from the store: plugged-in, generated earlier, or
// generated now (see Authority.Load).
func (a *Authority) loadCA(ctx context.Context, m Mesh) (*meshCA, error) {
	// Two rounds: the second reads what a concurrent creator stored when
	// ours lost the race.
	for range 2 {
		blobs, err := a.store.Get(ctx, m.Name)
		if err != nil {
			return nil, err
		}
		if _, ok := blobs[FileCACert]; ok {
			return a.buildCA(m, blobs)
		}
		_, hasCert := blobs[FileRootCert]
		_, hasKey := blobs[FileRootKey]
		switch {
		case hasCert && hasKey:
			return a.buildCA(m, blobs)
		case hasCert:
			return nil, fmt.Errorf("%s exists, but neither %s (a root nave generated) nor %s (a plugged-in CA: %s, %s, %s, %s) does",
				FileRootCert, FileRootKey, FileCACert, FileCACert, FileCAKey, FileCertChain, FileRootCert)
		case hasKey:
			return nil, fmt.Errorf("%s exists without %s (an interrupted creation?): remove %s to generate a new root, or restore %s",
				FileRootKey, FileRootCert, FileRootKey, FileRootCert)
		}
		if _, ok := blobs[FileCAKey]; ok {
			return nil, fmt.Errorf("%s exists without %s: a plugged-in CA needs %s, %s, %s and %s",
				FileCAKey, FileCACert, FileCACert, FileCAKey, FileCertChain, FileRootCert)
		}
		certPEM, keyPEM, err := a.newRoot(m)
		if err != nil {
			return nil, fmt.Errorf("generate root: %w", err)
		}
		err = a.store.Create(ctx, m.Name, map[string][]byte{FileRootCert: certPEM, FileRootKey: keyPEM})
		if errors.Is(err, ErrExist) {
			continue // another Authority created it first: use theirs
		}
		if err != nil {
			return nil, fmt.Errorf("store generated root: %w", err)
		}
		c, err := a.generatedCA(m, certPEM, keyPEM, sourceCreated)
		if err != nil {
			return nil, err
		}
		c.blobsSum = blobsSum(map[string][]byte{FileRootCert: certPEM, FileRootKey: keyPEM})
		return c, nil
	}
	// Create found the place taken twice, yet Get finds no CA in it: either
	// a concurrent creator has still not finished, or the place exists and
	// holds none of the CA's blobs (an empty Secret made by hand, say).
	return nil, fmt.Errorf("the store says the CA exists, but it holds none of %s, %s (or a plugged-in %s): if it was not just being created by another replica, remove it (an empty Secret or directory) or fill it with a plugged-in CA",
		FileRootCert, FileRootKey, FileCACert)
}

// pluggedCA checks and builds a plugged-in CA from Istio's cacerts files.
func (a *Authority) pluggedCA(m Mesh, blobs map[string][]byte) (*meshCA, error) {
	for _, name := range []string{FileCAKey, FileCertChain, FileRootCert} {
		if _, ok := blobs[name]; !ok {
			return nil, fmt.Errorf("plugged-in CA: %s exists but %s is missing (want %s, %s, %s and %s)",
				FileCACert, name, FileCACert, FileCAKey, FileCertChain, FileRootCert)
		}
	}
	caCerts, err := parseCertsPEM(blobs[FileCACert])
	if err != nil {
		return nil, fmt.Errorf("plugged-in CA: %s: %w", FileCACert, err)
	}
	if len(caCerts) != 1 {
		return nil, fmt.Errorf("plugged-in CA: %s: holds %d certificates, want 1 (the signing certificate; its chain goes in %s)",
			FileCACert, len(caCerts), FileCertChain)
	}
	caCert := caCerts[0]
	if err := checkCACert(caCert); err != nil {
		return nil, fmt.Errorf("plugged-in CA: %s: %w", FileCACert, err)
	}
	key, err := parseKeyPEM(blobs[FileCAKey])
	if err != nil {
		return nil, fmt.Errorf("plugged-in CA: %s: %w", FileCAKey, err)
	}
	if !publicKeyMatches(caCert, key) {
		return nil, fmt.Errorf("plugged-in CA: %s: key does not match the certificate in %s (%s)",
			FileCAKey, FileCACert, caCert.Subject)
	}
	chain, err := parseCertsPEM(blobs[FileCertChain])
	if err != nil {
		return nil, fmt.Errorf("plugged-in CA: %s: %w", FileCertChain, err)
	}
	roots, err := parseCertsPEM(blobs[FileRootCert])
	if err != nil {
		return nil, fmt.Errorf("plugged-in CA: %s: %w", FileRootCert, err)
	}
	rootPool := x509.NewCertPool()
	for i, r := range roots {
		if err := checkCACert(r); err != nil {
			return nil, fmt.Errorf("plugged-in CA: %s: certificate %d (%s): %w", FileRootCert, i+1, r.Subject, err)
		}
		rootPool.AddCert(r)
	}
	inter := x509.NewCertPool()
	for _, c := range chain {
		inter.AddCert(c)
	}
	now := a.opts.Now()
	paths, err := caCert.Verify(x509.VerifyOptions{
		Roots:         rootPool,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return nil, fmt.Errorf("plugged-in CA: %s (%s) does not chain to %s through %s: %w",
			FileCACert, caCert.Subject, FileRootCert, FileCertChain, err)
	}
	// The leaves it issues are for serverAuth and clientAuth: a chain whose
	// extended key usages exclude either would issue certificates that do
	// not verify.
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := caCert.Verify(x509.VerifyOptions{Roots: rootPool, Intermediates: inter, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return nil, fmt.Errorf("plugged-in CA: %s (%s): its chain does not allow %s, which workload certificates need: %w",
				FileCACert, caCert.Subject, extKeyUsageName(u), err)
		}
	}
	// Prefer the shortest path: fewer certificates on every handshake.
	path := slices.MinFunc(paths, func(x, y []*x509.Certificate) int { return len(x) - len(y) })
	return newMeshCA(m, sourcePlugged, key, path, roots), nil
}

// generatedCA checks and builds a CA from a root nave generated.
func (a *Authority) generatedCA(m Mesh, certPEM, keyPEM []byte, source string) (*meshCA, error) {
	certs, err := parseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("generated root: %s: %w", FileRootCert, err)
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("generated root: %s: holds %d certificates, want 1", FileRootCert, len(certs))
	}
	root := certs[0]
	if err := checkCACert(root); err != nil {
		return nil, fmt.Errorf("generated root: %s: %w", FileRootCert, err)
	}
	if err := root.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("generated root: %s: not self-signed: %w", FileRootCert, err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("generated root: %s: %w", FileRootKey, err)
	}
	if !publicKeyMatches(root, key) {
		return nil, fmt.Errorf("generated root: %s: key does not match the certificate in %s", FileRootKey, FileRootCert)
	}
	if now := a.opts.Now(); now.After(root.NotAfter) || now.Before(root.NotBefore) {
		return nil, fmt.Errorf("generated root: %s: valid from %s to %s, not now (%s)", FileRootCert,
			root.NotBefore.UTC().Format(time.RFC3339), root.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	// A root names the trust domain it was made for: loading it for
	// another would issue identities it was never meant to vouch for.
	if _, td, ok := GeneratedRootMesh(root); ok && td != m.TrustDomain {
		return nil, fmt.Errorf("generated root: %s: was generated for trust domain %q, not %q (a mesh's trust domain cannot change while it keeps its root)",
			FileRootCert, td, m.TrustDomain)
	}
	return newMeshCA(m, source, key, []*x509.Certificate{root}, certs), nil
}

func newMeshCA(m Mesh, source string, key crypto.Signer, path, roots []*x509.Certificate) *meshCA {
	c := &meshCA{mesh: m, source: source, signer: key, path: path}
	c.notAfter = path[0].NotAfter
	for _, p := range path {
		c.pathPEM = append(c.pathPEM, encodeCertPEM(p.Raw))
		if p.NotAfter.Before(c.notAfter) {
			c.notAfter = p.NotAfter
		}
	}
	c.setTrusted(roots)
	return c
}

// setTrusted makes roots (duplicates dropped, order kept) the roots c's
// certificates are verified against and distributed with. Only while c is
// being built.
func (c *meshCA) setTrusted(roots []*x509.Certificate) {
	c.rootCerts = nil
	c.roots = x509.NewCertPool()
	var bundle bytes.Buffer
	for _, r := range roots {
		if slices.ContainsFunc(c.rootCerts, func(x *x509.Certificate) bool { return x.Equal(r) }) {
			continue
		}
		c.rootCerts = append(c.rootCerts, r)
		c.roots.AddCert(r)
		bundle.Write(encodeCertPEM(r.Raw))
	}
	c.rootsPEM = bundle.Bytes()
}

// checkCACert refuses a certificate that may not sign certificates.
func checkCACert(c *x509.Certificate) error {
	if !c.BasicConstraintsValid || !c.IsCA {
		return fmt.Errorf("%s is not a CA certificate (basic constraints CA:TRUE missing)", c.Subject)
	}
	if c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("%s may not sign certificates (key usage keyCertSign missing)", c.Subject)
	}
	return nil
}

// newRoot generates a self-signed root for m: ECDSA P-256, valid from an
// hour ago (clock skew) for Options.RootTTL. It returns the certificate and
// its PKCS #8 key, PEM-encoded.
func (a *Authority) newRoot(m Mesh) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	now := a.opts.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// Each attribute stays within X.520's 64 characters for mesh names;
		// the trust domain is the Organization, as Istio names its roots.
		Subject: pkix.Name{
			CommonName:         generatedRootCN,
			Organization:       []string{m.TrustDomain},
			OrganizationalUnit: []string{"mesh " + m.Name},
		},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(a.opts.RootTTL),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCertPEM(der), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

// randomSerial returns a random positive 128-bit serial number.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, err
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

func extKeyUsageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageServerAuth {
		return "serverAuth"
	}
	return "clientAuth"
}
