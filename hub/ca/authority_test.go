package ca

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

var ctx = context.Background()

func TestIssueAndVerify(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := newAuthority(t, t.TempDir(), Options{Registerer: reg}, mesh1)
	id := mustID(t, uriA)

	before := time.Now()
	chainPEM, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	chain := parseChain(t, chainPEM)
	if len(chain) != 2 {
		t.Fatalf("chain of %d certificates, want leaf and root", len(chain))
	}
	roots, err := a.Roots("m1")
	if err != nil {
		t.Fatal(err)
	}
	path := verifyLeaf(t, chain, roots, time.Now())
	if !path[len(path)-1].Equal(chain[len(chain)-1]) {
		t.Error("the chain's last certificate is not the root it verifies to")
	}
	// It verifies for both usages, as a server and as a client.
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("usage %v: %v", u, err)
		}
	}

	leaf := chain[0]
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != uriA {
		t.Errorf("URI SANs %v, want [%s]", leaf.URIs, uriA)
	}
	if leaf.Subject.String() != "" {
		t.Errorf("subject %q, want empty (the CSR's is ignored)", leaf.Subject)
	}
	if leaf.IsCA || !leaf.BasicConstraintsValid {
		t.Error("leaf is a CA or lacks basic constraints")
	}
	if want := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment; leaf.KeyUsage != want {
		t.Errorf("key usage %v, want %v", leaf.KeyUsage, want)
	}
	if len(leaf.ExtKeyUsage) != 2 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Errorf("ext key usage %v", leaf.ExtKeyUsage)
	}
	if n := leaf.SerialNumber.BitLen(); n < 100 || n > 128 {
		t.Errorf("serial of %d bits, want a random 128-bit number", n)
	}
	if d := before.Sub(leaf.NotBefore); d < 59*time.Second || d > 2*time.Minute {
		t.Errorf("NotBefore %s before now, want a minute", d)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life != DefaultTTL+leafBackdate {
		t.Errorf("lifetime %s, want the default %s (+1 minute back-dating)", life, DefaultTTL)
	}

	// A second certificate gets another serial.
	again, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	if parseChain(t, again)[0].SerialNumber.Cmp(leaf.SerialNumber) == 0 {
		t.Error("two certificates with one serial")
	}
	if got := testutil.ToFloat64(a.metrics.issued); got != 2 {
		t.Errorf("issued counter %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "nave_hub_ca_certificates_issued_total", "nave_hub_ca_refusals_total"); err != nil || n != 1+len(certreq.Reasons) {
		t.Errorf("registered series %d (%v), want 1 + one per reason", n, err)
	}

	// The root: generated, P-256, CA, named after the mesh.
	root := chain[1]
	if k, ok := root.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("root key %T, want ECDSA P-256", root.PublicKey)
	}
	if !root.IsCA || root.Subject.Organization[0] != "m1.example" || root.Subject.OrganizationalUnit[0] != "mesh m1" {
		t.Errorf("root %s: want a CA named after mesh m1 and m1.example", root.Subject)
	}
	if life := time.Until(root.NotAfter); life < DefaultRootTTL-time.Hour {
		t.Errorf("root valid for %s, want about 10 years", life)
	}
	bundle, err := a.RootsPEM("m1")
	if err != nil || !bytes.Equal(bundle, encodeCertPEM(root.Raw)) {
		t.Errorf("RootsPEM = %q, %v; want the root", bundle, err)
	}
	if td, err := a.TrustDomain("m1"); err != nil || td != "m1.example" {
		t.Errorf("TrustDomain = %q, %v", td, err)
	}
	if m, ok := a.MeshOf("m1.example"); !ok || m != mesh1 {
		t.Errorf("MeshOf = %v, %v", m, ok)
	}
}

func TestTTL(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	dir := t.TempDir()
	a := newAuthority(t, dir, Options{MaxTTL: 48 * time.Hour, Now: func() time.Time { return now }}, mesh1)
	id := mustID(t, uriA)
	for _, tc := range []struct {
		ask, want time.Duration
	}{
		{0, DefaultTTL},
		{time.Hour, time.Hour},
		{48 * time.Hour, 48 * time.Hour},
		{1000 * time.Hour, 48 * time.Hour}, // clamped
	} {
		chain, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{id}, TTL: tc.ask})
		if err != nil {
			t.Fatal(err)
		}
		leaf := parseChain(t, chain)[0]
		if !leaf.NotAfter.Equal(now.Add(tc.want)) || !leaf.NotBefore.Equal(now.Add(-time.Minute)) {
			t.Errorf("TTL %s: valid %s to %s, want %s to %s", tc.ask, leaf.NotBefore, leaf.NotAfter, now.Add(-time.Minute), now.Add(tc.want))
		}
	}
	_, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{id}, TTL: -time.Second})
	wantRefusal(t, err, certreq.ReasonInvalidRequest, "negative")

	// A default above the maximum is clamped too.
	b := newAuthority(t, dir, Options{DefaultTTL: 100 * time.Hour, MaxTTL: 2 * time.Hour, Now: func() time.Time { return now }}, mesh1)
	chain, err := b.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	if leaf := parseChain(t, chain)[0]; !leaf.NotAfter.Equal(now.Add(2 * time.Hour)) {
		t.Errorf("default over max: NotAfter %s, want %s", leaf.NotAfter, now.Add(2*time.Hour))
	}
}

// TestLeafNeverOutlivesCA: near the end of the root's life, a leaf ends
// with the root.
func TestLeafNeverOutlivesCA(t *testing.T) {
	now := time.Now()
	clock := now
	a := newAuthority(t, t.TempDir(), Options{RootTTL: 10 * time.Hour, Now: func() time.Time { return clock }}, mesh1)
	root := parseChain(t, must(a.RootsPEM("m1")))[0]
	clock = now.Add(9 * time.Hour)
	chain, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{mustID(t, uriA)}})
	if err != nil {
		t.Fatal(err)
	}
	if leaf := parseChain(t, chain)[0]; !leaf.NotAfter.Equal(root.NotAfter) {
		t.Errorf("leaf NotAfter %s, want the root's %s", leaf.NotAfter, root.NotAfter)
	}
	clock = now.Add(11 * time.Hour)
	if _, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{mustID(t, uriA)}}); err == nil {
		t.Error("signed with an expired root")
	} else if _, refusal := certreq.ReasonOf(err); refusal {
		t.Errorf("an expired CA is the CA's failure, not a refusal: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestRestartKeepsRoot(t *testing.T) {
	dir := t.TempDir()
	a := newAuthority(t, dir, Options{}, mesh1, mesh2)
	chainPEM, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{mustID(t, uriA)}})
	if err != nil {
		t.Fatal(err)
	}
	root1, _ := a.RootsPEM("m1")
	root2, _ := a.RootsPEM("m2")
	if bytes.Equal(root1, root2) {
		t.Fatal("two meshes share a root")
	}

	b := newAuthority(t, dir, Options{}, mesh1, mesh2)
	for _, m := range []string{"m1", "m2"} {
		old, _ := a.RootsPEM(m)
		got, _ := b.RootsPEM(m)
		if !bytes.Equal(old, got) {
			t.Errorf("mesh %s: the root changed across a restart", m)
		}
	}
	roots, _ := b.Roots("m1")
	verifyLeaf(t, parseChain(t, chainPEM), roots, time.Now())
	if b.meshes["m1"].source != sourceGenerated || a.meshes["m1"].source != sourceCreated {
		t.Errorf("sources %s then %s, want created then generated", a.meshes["m1"].source, b.meshes["m1"].source)
	}

	// Files: the key is private to the hub's user.
	for path, want := range map[string]os.FileMode{
		filepath.Join(dir, "m1"):               0o700 | os.ModeDir,
		filepath.Join(dir, "m1", FileRootKey):  0o600,
		filepath.Join(dir, "m1", FileRootCert): 0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(filepath.Join(dir, "m1"))
	for _, e := range entries {
		switch e.Name() {
		case FileRootCert, FileRootKey, ".lock":
		default:
			t.Errorf("left over: %s", e.Name())
		}
	}
}

// TestConcurrentCreateOneRoot: Authorities racing to create one mesh's
// root on one directory all end with the same root.
func TestConcurrentCreateOneRoot(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	roots := make([][]byte, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store, err := NewDirStore(dir)
			if err != nil {
				errs <- err
				return
			}
			a, err := New(store, Options{})
			if err != nil {
				errs <- err
				return
			}
			if err := a.Load(ctx, mesh1); err != nil {
				errs <- err
				return
			}
			roots[i], _ = a.RootsPEM("m1")
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if !bytes.Equal(roots[0], roots[i]) {
			t.Fatalf("authority %d has another root than authority 0", i)
		}
	}
	onDisk, err := os.ReadFile(filepath.Join(dir, "m1", FileRootCert))
	if err != nil || !bytes.Equal(onDisk, roots[0]) {
		t.Fatalf("stored root differs from the one in use (%v)", err)
	}
}

func TestLoad(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1)
	if err := a.Load(ctx, mesh1); err != nil {
		t.Errorf("loading a mesh again: %v", err)
	}
	wantErrorSays(t, a.Load(ctx, Mesh{Name: "m1", TrustDomain: "other.example"}), `mesh "m1" is loaded with trust domain "m1.example"`)
	wantErrorSays(t, a.Load(ctx, Mesh{Name: "m3", TrustDomain: "m1.example"}), `trust domain "m1.example" is mesh "m1"'s`)
	wantErrorSays(t, a.Load(ctx, Mesh{Name: "M3", TrustDomain: "m3.example"}), `mesh name "M3"`)
	wantErrorSays(t, a.Load(ctx, Mesh{Name: "m3", TrustDomain: "m3_example"}), `mesh "m3"`, "trust domain")
	if got := a.Meshes(); len(got) != 1 || got[0] != mesh1 {
		t.Errorf("Meshes = %v", got)
	}
	if _, err := a.Roots("nope"); err == nil {
		t.Error("Roots of an unknown mesh")
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New with a nil store")
	}
	s, _ := NewDirStore(t.TempDir())
	if _, err := New(s, Options{MaxTTL: -1}); err == nil {
		t.Error("New with a negative MaxTTL")
	}
}

// TestLoadRefusesPartialRoot: a root's certificate without its key, or the
// reverse, stops the mesh with a message that names the files.
func TestLoadRefusesPartialRoot(t *testing.T) {
	dir := t.TempDir()
	newAuthority(t, dir, Options{}, mesh1)
	cert, _ := os.ReadFile(filepath.Join(dir, "m1", FileRootCert))
	key, _ := os.ReadFile(filepath.Join(dir, "m1", FileRootKey))
	other := certreqtest.ECKey(t)
	otherKey := (&testCA{key: other}).keyPEM(t)

	for _, tc := range []struct {
		name  string
		files map[string][]byte
		says  []string
	}{
		{"cert only", map[string][]byte{FileRootCert: cert}, []string{FileRootCert + " exists, but neither " + FileRootKey}},
		{"key only", map[string][]byte{FileRootKey: key}, []string{FileRootKey + " exists without " + FileRootCert}},
		{"wrong key", map[string][]byte{FileRootCert: cert, FileRootKey: otherKey}, []string{FileRootKey + ": key does not match"}},
		{"garbage cert", map[string][]byte{FileRootCert: []byte("nope"), FileRootKey: key}, []string{FileRootCert, "no CERTIFICATE PEM block"}},
		{"key is a cert", map[string][]byte{FileRootCert: cert, FileRootKey: cert}, []string{FileRootKey, `"CERTIFICATE", want PRIVATE KEY`}},
		{"ca key only", map[string][]byte{FileCAKey: key}, []string{FileCAKey + " exists without " + FileCACert}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			writeFiles(t, filepath.Join(d, "m1"), tc.files)
			store, _ := NewDirStore(d)
			a, _ := New(store, Options{})
			err := a.Load(ctx, mesh1)
			wantErrorSays(t, err, append([]string{`ca: mesh "m1" (`}, tc.says...)...)
		})
	}
}

func TestSignRefusals(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := newAuthority(t, t.TempDir(), Options{Registerer: reg}, mesh1, mesh2)
	granted := mustID(t, uriA)
	opts := SignOptions{Identities: []ID{granted}}

	for _, tc := range []struct {
		name   string
		mesh   string
		csr    []byte
		opts   SignOptions
		reason certreq.Reason
		says   string
	}{
		{"other trust domain", "m1", certreqtest.For(t, "spiffe://other.td/ns/a/sa/b"), opts, certreq.ReasonIdentityNotAllowed,
			`csr: URI SAN spiffe://other.td/ns/a/sa/b: trust domain "other.td" is not mesh "m1"'s ("m1.example")`},
		{"another mesh's trust domain", "m1", certreqtest.For(t, "spiffe://m2.example/ns/a/sa/b"), opts, certreq.ReasonIdentityNotAllowed,
			`trust domain "m2.example" is not mesh "m1"'s`},
		{"other namespace", "m1", certreqtest.For(t, "spiffe://m1.example/ns/x/sa/b"), opts, certreq.ReasonIdentityNotAllowed,
			"csr: URI SAN spiffe://m1.example/ns/x/sa/b: not an identity this caller may obtain (it may obtain " + uriA + ")"},
		{"other service account", "m1", certreqtest.For(t, "spiffe://m1.example/ns/a/sa/admin"), opts, certreq.ReasonIdentityNotAllowed,
			"sa/admin: not an identity this caller may obtain"},
		{"granted plus another", "m1", certreqtest.For(t, uriA, "spiffe://m1.example/ns/a/sa/c"), opts, certreq.ReasonIdentityNotAllowed,
			"csr: has 2 URI SANs (" + uriA + ", spiffe://m1.example/ns/a/sa/c); an X.509 SVID has exactly one"},
		{"two granted", "m1", certreqtest.For(t, uriA, "spiffe://m1.example/ns/a/sa/c"),
			SignOptions{Identities: []ID{granted, mustID(t, "spiffe://m1.example/ns/a/sa/c")}}, certreq.ReasonIdentityNotAllowed, "has 2 URI SANs"},
		{"nothing granted", "m1", certreqtest.For(t, uriA), SignOptions{}, certreq.ReasonIdentityNotAllowed, "may obtain none"},
		{"no URI SAN", "m1", certreqtest.New(t, certreqtest.ECKey(t), certreqtest.Template{DNS: []string{"a.example"}}), opts, certreq.ReasonIdentityNotAllowed, "csr: has no URI SAN"},
		{"not SPIFFE", "m1", certreqtest.For(t, "https://m1.example/ns/a/sa/b"), opts, certreq.ReasonIdentityNotAllowed, "scheme"},
		{"encoded path", "m1", certreqtest.For(t, "spiffe://m1.example/ns/a/sa/%62"), opts, certreq.ReasonIdentityNotAllowed, "percent"},
		{"DNS SAN", "m1", certreqtest.New(t, certreqtest.ECKey(t), certreqtest.Template{URIs: []string{uriA}, DNS: []string{"evil.example"}}), opts, certreq.ReasonIdentityNotAllowed,
			`csr: DNS SAN "evil.example": not allowed for this caller (allowed: none)`},
		{"IP SAN", "m1", certreqtest.New(t, certreqtest.ECKey(t), certreqtest.Template{URIs: []string{uriA}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}), opts, certreq.ReasonIdentityNotAllowed,
			"csr: IP SAN 127.0.0.1: not allowed"},
		{"email SAN", "m1", certreqtest.New(t, certreqtest.ECKey(t), certreqtest.Template{URIs: []string{uriA}, Emails: []string{"a@m1.example"}}), opts, certreq.ReasonIdentityNotAllowed,
			`csr: email SAN "a@m1.example"`},
		{"garbage", "m1", []byte("garbage"), opts, certreq.ReasonInvalidCSR, "csr: "},
		{"unknown mesh", "m9", certreqtest.For(t, uriA), opts, certreq.ReasonUnknownMesh, `mesh "m9" has no CA loaded`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chain, err := a.Sign(ctx, tc.mesh, tc.csr, tc.opts)
			if chain != nil {
				t.Error("returned a chain along with the refusal")
			}
			wantRefusal(t, err, tc.reason, tc.says)
		})
	}
	if got := testutil.ToFloat64(a.metrics.issued); got != 0 {
		t.Errorf("issued %v, want 0", got)
	}
	for r, want := range map[certreq.Reason]float64{certreq.ReasonIdentityNotAllowed: 13, certreq.ReasonInvalidCSR: 1, certreq.ReasonUnknownMesh: 1, certreq.ReasonKeyNotAllowed: 0} {
		if got := testutil.ToFloat64(a.metrics.refusals.WithLabelValues(string(r))); got != want {
			t.Errorf("refusals{reason=%s} = %v, want %v", r, got, want)
		}
	}
}

func TestSignAllowedDNSAndIP(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1)
	csr := certreqtest.New(t, certreqtest.ECKey(t), certreqtest.Template{URIs: []string{uriA}, DNS: []string{"a.m1.example"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	chain, err := a.Sign(ctx, "m1", csr, SignOptions{Identities: []ID{mustID(t, uriA)},
		DNSNames: []string{"a.m1.example"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	leaf := parseChain(t, chain)[0]
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "a.m1.example" || len(leaf.IPAddresses) != 1 {
		t.Errorf("SANs DNS %v IP %v", leaf.DNSNames, leaf.IPAddresses)
	}
}

// TestSignClusterID: a spoke identity is signed like a workload's when it
// is granted.
func TestSignClusterID(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1)
	id, err := ClusterID("m1.example", "east")
	if err != nil {
		t.Fatal(err)
	}
	chain, err := a.Sign(ctx, "m1", certreqtest.For(t, id.String()), SignOptions{Identities: []ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	roots, _ := a.Roots("m1")
	leaf := verifyLeaf(t, parseChain(t, chain), roots, time.Now())[0]
	if got, err := ParseClusterID(leaf.URIs[0].String()); err != nil || got != id {
		t.Errorf("leaf URI %v (%v), want %s", leaf.URIs, err, id)
	}
}
