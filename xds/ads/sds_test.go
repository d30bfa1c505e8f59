package ads_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
)

// minter is a SecretSource whose certificates are due for renewal after
// renewAfter; each names its identity and a serial counting the mints.
type minter struct {
	renewAfter time.Duration
	n          atomic.Int64
}

func (m *minter) Mint(_ context.Context, id ads.WorkloadIdentity) (*ads.Credential, error) {
	n := m.n.Add(1)
	return &ads.Credential{
		ChainPEM: fmt.Appendf(nil, "chain of %s #%d", id.Name, n), KeyPEM: fmt.Appendf(nil, "key #%d", n),
		RootsPEM: []byte("roots of " + id.Mesh), Serial: fmt.Sprint(n), RenewAt: time.Now().Add(m.renewAfter),
	}, nil
}

func secrets(t *testing.T, res *anypb.Any) *tlsv3.Secret {
	t.Helper()
	s := &tlsv3.Secret{}
	if err := res.UnmarshalTo(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// An authenticated Envoy gets its workload certificate and its mesh's roots
// by SDS on the ADS stream, and a new certificate when it is due.
func TestSecretsOverSotW(t *testing.T) {
	m := &minter{renewAfter: 300 * time.Millisecond}
	f := newFixture(t, nil, func(o *ads.Options) { o.Authenticator = metadataAuthenticator(); o.Secrets = m })
	p := f.connect(t, workloadNode("sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", "", "", ""), withIdentity("m/shop/cart"))
	p.Subscribe(typeurl.Secret, "default", "ROOTCA", "gateway-cred")
	r := p.Next(typeurl.Secret)
	got := map[string]*tlsv3.Secret{}
	for _, a := range r.GetResources() {
		s := secrets(t, a)
		got[s.GetName()] = s
	}
	if len(got) != 2 || string(got["default"].GetTlsCertificate().GetCertificateChain().GetInlineBytes()) != "chain of m/shop/cart #1" ||
		string(got["ROOTCA"].GetValidationContext().GetTrustedCa().GetInlineBytes()) != "roots of m" {
		t.Fatalf("secrets = %v; want default (the proxy's certificate) and ROOTCA (mesh m's roots) only", got)
	}
	p.ACK(r, "default", "ROOTCA", "gateway-cred")
	// Renewal: a new certificate, without the proxy asking.
	r2 := p.Next(typeurl.Secret)
	if r2.GetVersionInfo() == r.GetVersionInfo() || len(r2.GetResources()) != 2 {
		t.Fatalf("renewal pushed version %s with %d secrets, after %s", r2.GetVersionInfo(), len(r2.GetResources()), r.GetVersionInfo())
	}
	p.ACK(r2, "default", "ROOTCA", "gateway-cred")
}

func TestSecretsOverDelta(t *testing.T) {
	m := &minter{renewAfter: time.Hour}
	f := newFixture(t, nil, func(o *ads.Options) { o.Authenticator = metadataAuthenticator(); o.Secrets = m })
	p := f.connectDelta(t, workloadNode("sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", "", "", ""), withIdentity("m/shop/cart"))
	p.subscribe(typeurl.Secret, "default", "gateway-cred")
	r := p.next(typeurl.Secret)
	var names []string
	for _, res := range r.GetResources() {
		names = append(names, res.GetName())
	}
	if !slices.Equal(names, []string{"default"}) || !slices.Equal(r.GetRemovedResources(), []string{"gateway-cred"}) {
		t.Fatalf("resources %v, removed %v; want [default] and [gateway-cred] (not served by the hub)", names, r.GetRemovedResources())
	}
	p.ack(r)
	p.subscribe(typeurl.Secret, "ROOTCA")
	r = p.next(typeurl.Secret)
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "ROOTCA" || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("after subscribing ROOTCA: %v", r)
	}
	if m.n.Load() != 1 {
		t.Errorf("%d certificates minted for one stream, want 1", m.n.Load())
	}
}

// Without an authenticated identity (plaintext mode) no secret is served:
// the hub has nobody to mint for.
func TestNoSecretsWithoutIdentity(t *testing.T) {
	f := newFixture(t, nil, func(o *ads.Options) { o.Secrets = &minter{renewAfter: time.Hour} })
	p := f.connect(t, node("sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", "m"))
	p.Subscribe(typeurl.Secret, "default")
	p.Quiet(300*time.Millisecond, "a plaintext stream asked for secrets")
}
