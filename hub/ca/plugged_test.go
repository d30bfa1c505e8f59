package ca

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

// pluggedCA is an operator's CA hierarchy: root → intermediate → ca (the
// one nave signs with).
type pluggedCA struct {
	root, inter, ca *testCA
}

func newPluggedCA(t *testing.T) *pluggedCA {
	root := newTestCA(t, "operator root", nil)
	inter := newTestCA(t, "operator intermediate", root)
	return &pluggedCA{root: root, inter: inter, ca: newTestCA(t, "mesh m1 CA", inter)}
}

// files returns Istio's cacerts layout; cert-chain.pem is the signing
// certificate's chain up to the root, as Istio's tooling writes it.
func (p *pluggedCA) files(t *testing.T) map[string][]byte {
	return map[string][]byte{
		FileCACert:    p.ca.pem(),
		FileCAKey:     p.ca.keyPEM(t),
		FileCertChain: concat(p.ca.pem(), p.inter.pem(), p.root.pem()),
		FileRootCert:  p.root.pem(),
	}
}

func TestPluggedIntermediate(t *testing.T) {
	p := newPluggedCA(t)
	dir := t.TempDir()
	writeFiles(t, filepath.Join(dir, "m1"), p.files(t))
	a := newAuthority(t, dir, Options{}, mesh1)
	if got := a.meshes["m1"].source; got != sourcePlugged {
		t.Fatalf("source %s, want %s", got, sourcePlugged)
	}

	chainPEM, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{mustID(t, uriA)}})
	if err != nil {
		t.Fatal(err)
	}
	chain := parseChain(t, chainPEM)
	want := []*x509.Certificate{nil, p.ca.cert, p.inter.cert, p.root.cert}
	if len(chain) != len(want) {
		t.Fatalf("chain of %d certificates, want leaf, ca, intermediate, root", len(chain))
	}
	for i := 1; i < len(want); i++ {
		if !chain[i].Equal(want[i]) {
			t.Errorf("chain[%d] is %s, want %s", i, chain[i].Subject, want[i].Subject)
		}
	}
	// The leaf verifies to the operator's root through the chain, and only
	// through it.
	operatorRoot := x509.NewCertPool()
	operatorRoot.AddCert(p.root.cert)
	path := verifyLeaf(t, chain, operatorRoot, time.Now())
	if len(path) != 4 || !path[1].Equal(p.ca.cert) {
		t.Errorf("verified path of %d certificates", len(path))
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: operatorRoot, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("the leaf verified without its intermediates")
	}
	roots, _ := a.Roots("m1")
	verifyLeaf(t, chain, roots, time.Now())
	bundle, _ := a.RootsPEM("m1")
	if string(bundle) != string(p.root.pem()) {
		t.Error("RootsPEM is not root-cert.pem's root")
	}
	// Nothing was generated beside the plugged-in files.
	if _, err := os.Stat(filepath.Join(dir, "m1", FileRootKey)); err == nil {
		t.Error("a root key was generated although a CA is plugged in")
	}
}

// TestPluggedVariants: layouts operators write that are valid.
func TestPluggedVariants(t *testing.T) {
	p := newPluggedCA(t)
	other := newTestCA(t, "old root", nil)
	for name, edit := range map[string]func(map[string][]byte){
		// cert-chain.pem without the signing certificate and root.
		"chain of intermediates only": func(f map[string][]byte) { f[FileCertChain] = p.inter.pem() },
		// Two roots while one is rotated out.
		"two roots": func(f map[string][]byte) { f[FileRootCert] = concat(other.pem(), p.root.pem()) },
		// openssl's text before blocks and a SEC 1 key with EC PARAMETERS.
		"openssl text": func(f map[string][]byte) {
			f[FileCertChain] = concat([]byte("subject=CN=operator intermediate\n"), p.inter.pem())
			der, err := x509.MarshalECPrivateKey(p.ca.key)
			if err != nil {
				t.Fatal(err)
			}
			f[FileCAKey] = concat([]byte("-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"),
				pemBlock("EC PRIVATE KEY", der))
		},
	} {
		t.Run(name, func(t *testing.T) {
			files := p.files(t)
			edit(files)
			dir := t.TempDir()
			writeFiles(t, filepath.Join(dir, "m1"), files)
			a := newAuthority(t, dir, Options{}, mesh1)
			chain, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{mustID(t, uriA)}})
			if err != nil {
				t.Fatal(err)
			}
			roots, _ := a.Roots("m1")
			verifyLeaf(t, parseChain(t, chain), roots, time.Now())
		})
	}
}

func TestPluggedRefused(t *testing.T) {
	p := newPluggedCA(t)
	stranger := newTestCA(t, "stranger root", nil)
	strangerCA := newTestCA(t, "stranger CA", stranger)
	notCA := p.inter.leaf(t, certreqtest.ECKey(t), &x509.Certificate{Subject: pkix.Name{CommonName: "not a CA"}})
	expired := func() *testCA {
		key := certreqtest.ECKey(t)
		tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "expired CA"}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}
		return &testCA{cert: p.inter.leaf(t, key, tmpl), key: key}
	}()

	serverOnly := func() *testCA {
		key := certreqtest.ECKey(t)
		tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "server-only CA"}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		return &testCA{cert: p.inter.leaf(t, key, tmpl), key: key}
	}()

	for _, tc := range []struct {
		name string
		edit func(map[string][]byte)
		says []string
	}{
		{"chain excludes clientAuth", func(f map[string][]byte) {
			f[FileCACert], f[FileCAKey] = serverOnly.pem(), serverOnly.keyPEM(t)
		}, []string{FileCACert + " (CN=server-only CA): its chain does not allow clientAuth"}},
		{"mismatched key", func(f map[string][]byte) { f[FileCAKey] = strangerCA.keyPEM(t) },
			[]string{FileCAKey + ": key does not match the certificate in " + FileCACert}},
		{"chain misses the intermediate", func(f map[string][]byte) { f[FileCertChain] = concat(p.ca.pem(), p.root.pem()) },
			[]string{FileCACert + " (CN=mesh m1 CA) does not chain to " + FileRootCert + " through " + FileCertChain}},
		{"another root", func(f map[string][]byte) { f[FileRootCert] = stranger.pem() },
			[]string{"does not chain to " + FileRootCert}},
		{"ca from another hierarchy", func(f map[string][]byte) {
			f[FileCACert], f[FileCAKey] = strangerCA.pem(), strangerCA.keyPEM(t)
		}, []string{"CN=stranger CA) does not chain"}},
		{"ca-cert not a CA", func(f map[string][]byte) { f[FileCACert] = encodeCertPEM(notCA.Raw) },
			[]string{FileCACert + ": CN=not a CA is not a CA certificate"}},
		{"expired ca-cert", func(f map[string][]byte) {
			f[FileCACert], f[FileCAKey] = expired.pem(), expired.keyPEM(t)
		}, []string{"does not chain", "expired"}},
		{"two certificates in ca-cert", func(f map[string][]byte) { f[FileCACert] = concat(p.ca.pem(), p.inter.pem()) },
			[]string{FileCACert + ": holds 2 certificates, want 1"}},
		{"missing cert-chain", func(f map[string][]byte) { delete(f, FileCertChain) },
			[]string{FileCACert + " exists but " + FileCertChain + " is missing"}},
		{"missing key", func(f map[string][]byte) { delete(f, FileCAKey) },
			[]string{FileCACert + " exists but " + FileCAKey + " is missing"}},
		{"missing root", func(f map[string][]byte) { delete(f, FileRootCert) },
			[]string{FileCACert + " exists but " + FileRootCert + " is missing"}},
		{"encrypted key", func(f map[string][]byte) {
			f[FileCAKey] = pemBlock("ENCRYPTED PRIVATE KEY", []byte{1, 2, 3})
		}, []string{FileCAKey + ": key is encrypted"}},
		{"two keys", func(f map[string][]byte) { f[FileCAKey] = concat(p.ca.keyPEM(t), p.ca.keyPEM(t)) },
			[]string{FileCAKey, "second key block"}},
		{"root-cert holds a key", func(f map[string][]byte) { f[FileRootCert] = concat(p.root.pem(), p.root.keyPEM(t)) },
			[]string{FileRootCert + `: PEM block 2 is "PRIVATE KEY", want CERTIFICATE`}},
		{"garbage chain", func(f map[string][]byte) { f[FileCertChain] = []byte("garbage") },
			[]string{FileCertChain + ": no CERTIFICATE PEM block"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := p.files(t)
			tc.edit(files)
			dir := t.TempDir()
			writeFiles(t, filepath.Join(dir, "m1"), files)
			store, _ := NewDirStore(dir)
			a, _ := New(store, Options{})
			err := a.Load(ctx, mesh1)
			t.Log(err)
			wantErrorSays(t, err, append([]string{`plugged-in CA: `}, tc.says...)...)
			if _, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{mustID(t, uriA)}}); err == nil {
				t.Error("signed with a refused CA")
			}
			if _, err := os.Stat(filepath.Join(dir, "m1", FileRootKey)); err == nil {
				t.Error("generated a root instead of refusing")
			}
		})
	}
}
