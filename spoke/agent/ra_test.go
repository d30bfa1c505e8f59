package agent

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/spiffeid"
)

func dialTestRA(t *testing.T, addr string, ca *x509test.Authority, raID spiffeid.ID, tokenFile string) *RAClient {
	t.Helper()
	c, err := DialRA(RAOptions{Address: addr, Identity: raID, RootsPEM: ca.PEM(), TokenFile: tokenFile, Workload: testWorkload, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRAClientObtainsWithTheCurrentToken(t *testing.T) {
	ca := x509test.NewAuthority("mesh")
	ra := &fakeRA{ca: ca}
	addr := startRA(t, ra, testRA)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := dialTestRA(t, addr, ca, testRA, token)
	cred, err := c.Request(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(cred.ChainPEM, cred.KeyPEM); err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	if got := cred.Leaf.URIs[0].String(); got != testWorkload.String() {
		t.Errorf("identity %s", got)
	}
	if life := time.Until(cred.Leaf.NotAfter); life < 50*time.Minute || life > time.Hour {
		t.Errorf("lifetime %s; the agent asked for 1h", life)
	}
	// The kubelet rotates the projected token: the next request reads it anew.
	if err := os.WriteFile(token, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	cred2, err := c.Request(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if string(cred2.KeyPEM) == string(cred.KeyPEM) {
		t.Error("the second request reused the key; want a new one each time")
	}
	if got := ra.seen(); len(got) != 2 || got[0] != "Bearer first" || got[1] != "Bearer second" {
		t.Errorf("authorization headers %q; want Bearer first, then Bearer second", got)
	}
}

func TestRAClientRefuses(t *testing.T) {
	ca := x509test.NewAuthority("mesh")
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := spiffeid.ID{TrustDomain: "cluster.local", Path: "/nave/cluster/c2"}
	for _, c := range []struct {
		name  string
		ra    *fakeRA
		raID  spiffeid.ID // the RA's certificate
		roots []byte
		token string
		want  string
	}{
		{"an RA of another cluster", &fakeRA{ca: ca}, other, nil, token, "want " + testRA.String()},
		{"an RA the mesh roots did not sign", &fakeRA{ca: x509test.NewAuthority("other")}, testRA, nil, token, "certificate signed by unknown authority"},
		{"a certificate for another identity", &fakeRA{ca: ca, issueFor: "spiffe://cluster.local/ns/demo/sa/other"}, testRA, nil, token, "is for [spiffe://cluster.local/ns/demo/sa/other]"},
		{"no token", &fakeRA{ca: ca}, testRA, nil, filepath.Join(t.TempDir(), "missing"), "service-account token"},
		{"a refusal", &fakeRA{ca: ca, fail: 1}, testRA, nil, token, "the hub is away"},
	} {
		addr := startRA(t, c.ra, c.raID)
		cl := dialTestRA(t, addr, ca, testRA, c.token)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cl.Request(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v; want one saying %q", c.name, err, c.want)
		}
	}
}
