package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/tlspin"
	spokeenroll "github.com/navemesh/nave/spoke/enroll"
)

// navectl is the built binary.
var navectl string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "navectl-test")
	if err != nil {
		panic(err)
	}
	navectl = filepath.Join(dir, "navectl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	out, err := exec.CommandContext(ctx, "go", "build", "-o", navectl, ".").CombinedOutput()
	cancel()
	if err != nil {
		os.RemoveAll(dir)
		panic("go build navectl: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one navectl run.
type result struct {
	code           int
	stdout, stderr string
}

func navectlRun(t *testing.T, args ...string) result {
	t.Helper()
	return navectlRunInput(t, "", args...)
}

// navectlRunInput runs navectl with input on its standard input.
func navectlRunInput(t *testing.T, input string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, navectl, args...)
	cmd.Stdin = strings.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("navectl %v: %v", args, err)
	}
	return r
}

func TestTokenCreateThenRedeem(t *testing.T) {
	state := t.TempDir()
	r := navectlRun(t, "token", "create", "--state-dir", state, "--mesh", "acme", "--cluster", "east", "--ttl", "10m")
	if r.code != 0 {
		t.Fatalf("token create: exit %d: %s", r.code, r.stderr)
	}
	tok := strings.TrimSuffix(r.stdout, "\n")
	if strings.Count(r.stdout, "\n") != 1 || !strings.HasPrefix(tok, "nave-join.") {
		t.Fatalf("token create printed %q, want the token alone", r.stdout)
	}
	secret := tok[strings.LastIndex(tok, ".")+1:]
	if strings.Contains(r.stderr, secret) {
		t.Errorf("token create printed the secret on stderr: %q", r.stderr)
	}

	store, err := enroll.OpenStateDir(state)
	if err != nil {
		t.Fatal(err)
	}
	info, err := store.Redeem(t.Context(), tok)
	if err != nil {
		t.Fatalf("redeem the token navectl made: %v", err)
	}
	if info.Mesh != "acme" || info.Cluster != "east" || info.ExpiresAt.Sub(info.CreatedAt) != 10*time.Minute {
		t.Errorf("redeemed %+v", info)
	}

	r = navectlRun(t, "token", "list", "--state-dir", state)
	if r.code != 0 || !strings.Contains(r.stdout, info.ID) || !strings.Contains(r.stdout, "used") || strings.Contains(r.stdout, secret) {
		t.Errorf("token list: exit %d:\n%s", r.code, r.stdout)
	}

	// A token scoped to namespaces carries them to the enrollment.
	r = navectlRun(t, "token", "create", "--state-dir", state, "--mesh", "acme", "--cluster", "west", "--namespaces", "shop,bank")
	if r.code != 0 || !strings.Contains(r.stderr, "namespaces bank, shop") {
		t.Fatalf("token create --namespaces: exit %d: %s", r.code, r.stderr)
	}
	if info, err := store.Redeem(t.Context(), strings.TrimSpace(r.stdout)); err != nil || strings.Join(info.Namespaces, ",") != "bank,shop" {
		t.Errorf("scoped token redeemed as %+v, %v; want namespaces bank, shop", info, err)
	}
	if r := navectlRun(t, "token", "create", "--state-dir", state, "--mesh", "acme", "--cluster", "west", "--namespaces", "Not_A_Label"); r.code != 1 || !strings.Contains(r.stderr, "Not_A_Label") {
		t.Errorf("token create with a bad namespace: exit %d: %s", r.code, r.stderr)
	}
}

// TestEnrollListRevoke drives a hub (on navectl's state dir) and a spoke
// through navectl: a token, the spoke's enrollment and stream, the
// cluster listed, revoked, its stream closed.
func TestEnrollListRevoke(t *testing.T) {
	state := t.TempDir()
	h := enrolltest.StartHub(t, enrolltest.HubOptions{Dir: filepath.Join(state, enroll.StateSubdir)})
	caFile := filepath.Join(t.TempDir(), "hub-ca.pem")
	if err := os.WriteFile(caFile, h.Serving.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := navectlRun(t, "ca-hash", caFile)
	if r.code != 0 || r.stdout != tlspin.Hash(h.Serving.Cert)+"\n" {
		t.Fatalf("ca-hash: exit %d: %q", r.code, r.stdout)
	}
	pin := strings.TrimSpace(r.stdout)
	r = navectlRun(t, "token", "create", "--state-dir", state, "--mesh", enrolltest.MeshA, "--cluster", "east")
	if r.code != 0 {
		t.Fatalf("token create: exit %d: %s", r.code, r.stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spokeState := t.TempDir()
	if _, err := spokeenroll.Enroll(ctx, spokeenroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCAHash: pin, StateDir: spokeState}, strings.TrimSpace(r.stdout)); err != nil {
		t.Fatalf("spoke enrollment with navectl's token: %v", err)
	}
	ren, err := spokeenroll.NewRenewer(spokeenroll.RenewerOptions{Address: h.Addr, ServerName: enrolltest.ServerName, StateDir: spokeState})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(h.Addr, grpc.WithTransportCredentials(credentials.NewTLS(ren.ClientTLS())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := protocolv1.NewSyncClient(conn).Push(metadata.AppendToOutgoingContext(ctx, protocol.MetadataProtocol, protocol.Version))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("push stream: %v", err)
	}

	r = navectlRun(t, "cluster", "list", "--state-dir", state)
	if r.code != 0 || !strings.Contains(r.stdout, "east") || !strings.Contains(r.stdout, "enrolled") {
		t.Errorf("cluster list: exit %d:\n%s", r.code, r.stdout)
	}
	r = navectlRun(t, "cluster", "revoke", "--state-dir", state, "--mesh", enrolltest.MeshA, "--cluster", "east")
	if r.code != 0 {
		t.Fatalf("cluster revoke: exit %d: %s", r.code, r.stderr)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("the revoked spoke's stream: %v, want PermissionDenied: revoked", err)
	}
	r = navectlRun(t, "cluster", "list", "--state-dir", state)
	if !strings.Contains(r.stdout, "revoked") {
		t.Errorf("cluster list after revoke:\n%s", r.stdout)
	}
	r = navectlRun(t, "token", "create", "--state-dir", state, "--mesh", enrolltest.MeshA, "--cluster", "east")
	if r.code != 1 || !strings.Contains(r.stderr, "revoked") || r.stdout != "" {
		t.Errorf("token for a revoked cluster: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestUsageAndFailures(t *testing.T) {
	state := t.TempDir()
	out := filepath.Join(t.TempDir(), "certs")
	certArgs := func(flag, value string) []string {
		return []string{"cert", "issue", "--state-dir", state, "--mesh", "m", "--service-account", "sa", flag, value}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no command"},
		{[]string{"bogus"}, 2, "unknown command"},
		{[]string{"token"}, 2, "no subcommand"},
		{[]string{"token", "burn"}, 2, "unknown command"},
		{[]string{"token", "create", "--mesh", "a", "--cluster", "b"}, 2, "--state-dir is required"},
		{[]string{"token", "create", "--state-dir", state, "--cluster", "b"}, 2, "--mesh is required"},
		{[]string{"token", "create", "--state-dir", state, "--mesh", "a", "--cluster", "b", "--ttl", "soon"}, 2, "invalid value"},
		{[]string{"token", "create", "--state-dir", state, "--mesh", "a", "--cluster", "b", "--colour", "red"}, 2, "not defined"},
		{[]string{"token", "list", "--state-dir", state, "extra"}, 2, "unexpected argument"},
		{[]string{"ca-hash"}, 2, "want a PEM file, --state-dir DIR or --state-store kubernetes"},
		{[]string{"ca-hash", "--state-dir", state}, 1, "serving-ca/hub/root-cert.pem: no such file"},
		{[]string{"token", "list", "--state-store", "vault"}, 2, `--state-store "vault": want dir or kubernetes`},
		{[]string{"token", "list", "--state-store", "kubernetes", "--state-dir", state}, 2, "--state-dir is not used with --state-store kubernetes"},
		{[]string{"cluster", "list", "--state-dir", state, "--kubeconfig", "k"}, 2, "--kubeconfig is used only with --state-store kubernetes"},
		{[]string{"token", "create", "--state-dir", state, "--mesh", "a", "--cluster", "b", "--ttl", "720h"}, 1, "at most"},
		{[]string{"token", "create", "--state-dir", state, "--mesh", "A", "--cluster", "b"}, 1, "not a DNS label"},
		{[]string{"token", "list", "--state-dir", filepath.Join(state, "missing")}, 1, "not a directory"},
		{[]string{"cluster", "revoke", "--state-dir", state, "--mesh", "a", "--cluster", "b"}, 1, "not enrolled"},
		{[]string{"ca-hash", filepath.Join(state, "missing.pem")}, 1, "no such file"},
		{[]string{"cert"}, 2, "no subcommand"},
		{append(certArgs("--namespace", ""), "--out", out), 2, "--namespace is required"},
		{certArgs("--namespace", "demo"), 2, "--out is required"},
		{append(certArgs("--namespace", "Demo"), "--out", out), 2, `namespace "Demo"`},
		{append(certArgs("--namespace", "demo"), "--out", out, "--mesh", "Mesh"), 2, `--mesh "Mesh"`},
		{append(certArgs("--namespace", "demo"), "--out", out, "--trust-domain", "a/b"), 2, "trust domain"},
		{append(certArgs("--namespace", "demo"), "--out", out, "--ttl", "0s"), 2, "--ttl must be positive"},
		{append(certArgs("--namespace", "demo"), "--out", out, "--ttl", "200h"), 1, "at most"},
		{[]string{"cert", "issue", "--state-dir", filepath.Join(state, "missing"), "--mesh", "m", "--namespace", "demo",
			"--service-account", "sa", "--out", out}, 1, "not a directory"},
	} {
		r := navectlRun(t, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("navectl %v: exit %d, stderr %q; want exit %d mentioning %q", c.args, r.code, r.stderr, c.code, c.want)
		}
		if r.stdout != "" {
			t.Errorf("navectl %v printed %q on stdout", c.args, r.stdout)
		}
	}
	if r := navectlRun(t, "--help"); r.code != 0 || !strings.Contains(r.stdout, "token create") {
		t.Errorf("--help: exit %d, %q", r.code, r.stdout)
	}
	// Nothing was created by the failures.
	store, _ := enroll.OpenStateDir(state)
	if tokens, _ := store.ListTokens(t.Context()); len(tokens) != 0 {
		t.Errorf("failed commands left tokens: %+v", tokens)
	}
	for _, p := range []string{out, filepath.Join(state, "ca")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("failed commands made %s (err %v)", p, err)
		}
	}
}

// TestCertIssue issues a workload certificate the way the demo and a VM
// get one, and checks it against the mesh CA the hub would load from the
// same state dir.
func TestCertIssue(t *testing.T) {
	state := t.TempDir()
	out := filepath.Join(t.TempDir(), "certs")
	issue := func(extra ...string) result {
		t.Helper()
		return navectlRun(t, append([]string{"cert", "issue", "--state-dir", state, "--mesh", "default",
			"--namespace", "demo", "--service-account", "demo-client", "--out", out}, extra...)...)
	}
	r := issue("--ttl", "2h")
	if r.code != 0 {
		t.Fatalf("cert issue: exit %d: %s", r.code, r.stderr)
	}
	const wantID = "spiffe://cluster.local/ns/demo/sa/demo-client"
	if !strings.Contains(r.stdout, wantID) || !strings.Contains(r.stderr, "generated a new root") {
		t.Errorf("cert issue printed %q, stderr %q; want the identity, and a note that the mesh's root was created", r.stdout, r.stderr)
	}

	// The files: a key pair that matches, a chain that verifies against
	// root-cert.pem for both usages, one URI SAN, the lifetime asked for.
	pair, err := tls.LoadX509KeyPair(filepath.Join(out, "cert-chain.pem"), filepath.Join(out, "key.pem"))
	if err != nil {
		t.Fatalf("cert-chain.pem and key.pem: %v", err)
	}
	if st, err := os.Stat(filepath.Join(out, "key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key.pem: mode %v (err %v), want 0600", st.Mode().Perm(), err)
	}
	rootsPEM, err := os.ReadFile(filepath.Join(out, "root-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootsPEM) {
		t.Fatalf("root-cert.pem holds no certificate: %q", rootsPEM)
	}
	leaf := pair.Leaf
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		inter.AddCert(c)
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("the certificate does not verify against root-cert.pem for usage %v: %v", u, err)
		}
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != wantID || len(leaf.DNSNames)+len(leaf.IPAddresses) != 0 {
		t.Errorf("SANs: URIs %v, DNS %v, IPs %v; want only %s", leaf.URIs, leaf.DNSNames, leaf.IPAddresses, wantID)
	}
	if life := time.Until(leaf.NotAfter); life < 110*time.Minute || life > 2*time.Hour {
		t.Errorf("valid for %v more, want about 2h", life)
	}

	// root-cert.pem is the root of the mesh as the hub loads it from
	// <state dir>/ca.
	store, err := ca.NewDirStore(filepath.Join(state, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	hubCA, err := ca.New(store, ca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := hubCA.Load(context.Background(), ca.Mesh{Name: "default", TrustDomain: "cluster.local"}); err != nil {
		t.Fatal(err)
	}
	if hubRoots, _ := hubCA.RootsPEM("default"); !bytes.Equal(hubRoots, rootsPEM) {
		t.Errorf("root-cert.pem is not the root the hub loads:\n%s\nvs\n%s", rootsPEM, hubRoots)
	}

	// Again: the same root, no note, a new key.
	r = issue()
	if r.code != 0 || strings.Contains(r.stderr, "generated") {
		t.Fatalf("second cert issue: exit %d, stderr %q", r.code, r.stderr)
	}
	again, err := tls.LoadX509KeyPair(filepath.Join(out, "cert-chain.pem"), filepath.Join(out, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Leaf.Equal(leaf) || again.Leaf.CheckSignatureFrom(mustRoot(t, rootsPEM)) != nil {
		t.Errorf("second certificate: %v, want a new one from the same root", again.Leaf.Subject)
	}

	// Another trust domain than the stored root's is refused, and nothing
	// is written.
	other := filepath.Join(t.TempDir(), "other")
	r = navectlRun(t, "cert", "issue", "--state-dir", state, "--mesh", "default", "--trust-domain", "example.org",
		"--namespace", "demo", "--service-account", "demo-client", "--out", other)
	if r.code != 1 || !strings.Contains(r.stderr, `generated for trust domain "cluster.local"`) {
		t.Errorf("cert issue with another trust domain: exit %d, stderr %q; want 1 naming the root's trust domain", r.code, r.stderr)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("the refused cert issue wrote %s (err %v)", other, err)
	}
}

func mustRoot(t *testing.T, rootsPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(rootsPEM)
	if block == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
