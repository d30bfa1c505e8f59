package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
	spokeenroll "github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/xds/gen/build"
)

// sdsFirst asks for the secrets default and ROOTCA on an ADS stream and
// returns them by name.
func sdsFirst(t *testing.T, conn *grpc.ClientConn, node *corev3.Node) map[string]*tlsv3.Secret {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeurl.Secret, ResourceNames: []string{build.WorkloadCertSecret, build.RootCASecret}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("SDS: %v", err)
	}
	out := map[string]*tlsv3.Secret{}
	for _, a := range resp.GetResources() {
		s := &tlsv3.Secret{}
		if err := a.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		out[s.GetName()] = s
	}
	if len(out) != 2 {
		t.Fatalf("SDS answered %d secrets, want default and ROOTCA", len(out))
	}
	return out
}

// TestSecureHubRefusesWhatDoesNotBelong runs the hub with TLS (the
// default): a spoke enrolls with a join token and pushes over mTLS, and
// every attack of issue 4's list is refused while the victim's state stays
// as it was.
func TestSecureHubRefusesWhatDoesNotBelong(t *testing.T) {
	h := newSecureHub(t, "--sds.mint-keys") // an Envoy without an agent gets its secrets from the hub
	s1 := startSecureSpoke(t, h, "spoke-c1", "", "c1", h.token(t, "default", "c1", "1h"))
	harness.WaitReady(t, s1.url("/healthz/ready"), 30*time.Second)
	victim := h.waitSynced(t, "default/c1")
	unchanged := func(t *testing.T, what string) {
		t.Helper()
		got, ok := h.spokesView(t)["default/c1"]
		if !ok || !got.Connected || !got.Synced || !got.ConnectedAt.Equal(victim.ConnectedAt) || fmt.Sprint(got.Resources) != fmt.Sprint(victim.Resources) {
			t.Errorf("after %s the victim default/c1 changed: %+v, was %+v", what, got, victim)
		}
		for _, id := range []string{"default/c2", "other/o1"} {
			if _, ok := h.spokesView(t)[id]; ok {
				t.Errorf("after %s the hub holds %s", what, id)
			}
		}
	}

	t.Run("join tokens", func(t *testing.T) {
		used := mustNavectl(t, "token", "list", "--state-dir", h.state)
		if !strings.Contains(used, "used") {
			t.Errorf("token list after enrollment:\n%s", used)
		}
		reused := usedToken(t, h)
		forged := forge(t, h.token(t, "default", "c2", "1h"))
		expired := h.token(t, "default", "c2", "1s")
		testwait.For(t, 10*time.Second, func() error {
			list := mustNavectl(t, "token", "list", "--state-dir", h.state)
			for _, line := range strings.Split(list, "\n") {
				if f := strings.Fields(line); len(f) > 3 && f[2] == "c2" && f[3] == "expired" {
					return nil
				}
			}
			return fmt.Errorf("no expired token of c2 listed:\n%s", list)
		})
		for _, tc := range []struct{ name, cluster, token, says string }{
			{"reused", "c3", reused, "already used"},
			{"forged", "c2", forged, "does not match"},
			{"expired", "c2", expired, "expired"},
			{"malformed", "c2", "nave-join.not-a-token", "malformed"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := startSecureSpoke(t, h, "spoke-"+tc.name, "", tc.cluster, tc.token)
				waitExit(t, p.proc, tc.says)
				unchanged(t, tc.name+" token")
			})
		}
	})

	t.Run("spoke identities", func(t *testing.T) {
		roots := h.servingRoots(t)
		creds, err := spokeenroll.Load(s1.state)
		if err != nil {
			t.Fatal(err)
		}
		stolen := dialTLS(t, addr(h.spokes), roots, &creds.Certificate)
		// A c1 certificate claiming another cluster of its mesh, or a
		// cluster of another mesh, writes default/c1 and nothing else.
		for _, claim := range [][2]string{{"default", "c2"}, {"other", "o1"}} {
			if _, err := pushClaiming(t, stolen, claim[0], claim[1]); err != nil {
				t.Errorf("push claiming %s/%s: %v", claim[0], claim[1], err)
			}
			if _, ok := h.spokesView(t)[claim[0]+"/"+claim[1]]; ok {
				t.Errorf("a c1 certificate claiming %s/%s wrote it", claim[0], claim[1])
			}
		}
		// Each claim is logged once and counted.
		testwait.For(t, 10*time.Second, func() error {
			if v, err := metric(h.url("/metrics"), "nave_hub_spoke_claim_mismatches_total"); err != nil || v != 2 {
				return fmt.Errorf("nave_hub_spoke_claim_mismatches_total = %v (%v), want 2", v, err)
			}
			return nil
		})
		if n := strings.Count(h.proc.Log(), "spoke stream claims another cluster than its certificate"); n != 2 {
			t.Errorf("the hub logged %d claims of another cluster, want 2", n)
		}
		h.waitSynced(t, "default/c1") // the real spoke takes its stream back
		victim = h.spokesView(t)["default/c1"]

		rogue := selfSignedClient(t, "spiffe://cluster.local/nave/cluster/c1")
		_, err = pushClaiming(t, dialTLS(t, addr(h.spokes), roots, &rogue), "default", "c1")
		wantCode(t, "certificate from another CA", err, codes.Unauthenticated, "")
		_, err = pushClaiming(t, dialTLS(t, addr(h.spokes), roots, nil), "default", "c1")
		wantCode(t, "no client certificate", err, codes.Unauthenticated, "")
		plain, err := grpc.NewClient(addr(h.spokes), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		if _, err := pushClaiming(t, plain, "default", "c1"); err == nil {
			t.Error("a plaintext spoke was served")
		}
		unchanged(t, "the refused spokes")
	})

	t.Run("garbage handshakes", func(t *testing.T) {
		for _, port := range []int{h.spokes, h.xds} {
			for name, payload := range map[string][]byte{
				"garbage":             bytes.Repeat([]byte("not TLS at all\n"), 64),
				"oversized record":    append([]byte{0x16, 0x03, 0x01, 0xff, 0xff}, make([]byte, 16<<20)...),
				"truncated hello":     {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03},
				"oversized handshake": append([]byte{0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0xff, 0xff, 0xff}, make([]byte, 1<<20)...),
			} {
				c, err := net.DialTimeout("tcp", addr(port), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = c.Write(payload)
				c.Close()
				t.Logf("sent %s (%d bytes) to 127.0.0.1:%d", name, len(payload), port)
			}
		}
		harness.WaitReady(t, h.url("/healthz/ready"), 10*time.Second)
		unchanged(t, "garbage handshakes")
	})

	t.Run("proxies", func(t *testing.T) {
		roots := h.servingRoots(t)
		_, err := adsFirst(t, dialTLS(t, addr(h.xds), roots, nil), grpcNode("p1", nil))
		wantCode(t, "a proxy without a certificate", err, codes.Unauthenticated, "no client certificate: the xDS listener (xds.listen) needs mutual TLS")
		cert := h.workloadCert(t, "default", "cluster.local", "demo", "client")
		conn := dialTLS(t, addr(h.xds), roots, &cert)
		_, err = adsFirst(t, conn, grpcNode("p2", map[string]string{"MESH": "other"}))
		wantCode(t, "a proxy of mesh default asking for mesh other", err, codes.PermissionDenied, `names mesh "other"`)
		_, err = adsFirst(t, conn, grpcNode("p3", map[string]string{"NAMESPACE": "bank"}))
		wantCode(t, "a proxy naming another namespace", err, codes.PermissionDenied, `names namespace "bank"`)
		other := h.workloadCert(t, "other", "other.example", "demo", "client")
		resp, err := adsFirst(t, dialTLS(t, addr(h.xds), roots, &other), grpcNode("p4", map[string]string{"MESH": "default"}))
		if err == nil {
			t.Errorf("a proxy of mesh other got mesh default's clusters: %d", len(resp.GetResources()))
		}
		resp, err = adsFirst(t, conn, grpcNode("p5", nil))
		if err != nil || len(resp.GetResources()) == 0 {
			t.Errorf("a proxy with its own certificate: %v, %d clusters", err, len(resp.GetResources()))
		}
		// An Envoy sidecar gets its workload certificate and its mesh's
		// roots by SDS on the same stream.
		sidecar := grpcNode("sidecar~127.0.0.1~client-1.demo~demo.svc.cluster.local", nil)
		secrets := sdsFirst(t, conn, sidecar)
		chain := secrets[build.WorkloadCertSecret].GetTlsCertificate().GetCertificateChain().GetInlineBytes()
		key := secrets[build.WorkloadCertSecret].GetTlsCertificate().GetPrivateKey().GetInlineBytes()
		rootsPEM := secrets[build.RootCASecret].GetValidationContext().GetTrustedCa().GetInlineBytes()
		pair, err := tls.X509KeyPair(chain, key)
		if err != nil {
			t.Fatalf("SDS default: %v", err)
		}
		meshRoots := x509.NewCertPool()
		meshRoots.AppendCertsFromPEM(rootsPEM)
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: meshRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil ||
			len(pair.Leaf.URIs) != 1 || pair.Leaf.URIs[0].String() != "spiffe://cluster.local/ns/demo/sa/client" {
			t.Errorf("SDS default is %v (%v); want the proxy's own identity, verifying against ROOTCA", pair.Leaf.URIs, err)
		}
		if b, _ := os.ReadFile(filepath.Join(h.state, "ca", "default", "root-cert.pem")); string(b) != string(rootsPEM) {
			t.Error("SDS ROOTCA is not mesh default's root")
		}
		rogue := selfSignedClient(t, "spiffe://cluster.local/ns/demo/sa/client")
		_, err = adsFirst(t, dialTLS(t, addr(h.xds), roots, &rogue), grpcNode("p6", nil))
		wantCode(t, "a proxy with a certificate of another CA", err, codes.Unauthenticated, "")
		unchanged(t, "the proxies")
	})

	t.Run("metrics are documented", func(t *testing.T) {
		assertMetricsDocumented(t, h.url("/metrics"), s1.url("/metrics"))
	})

	t.Run("revocation", func(t *testing.T) {
		mustNavectl(t, "cluster", "revoke", "--state-dir", h.state, "--mesh", "default", "--cluster", "c1")
		start := time.Now()
		testwait.For(t, 10*time.Second, func() error {
			if _, ok := h.spokesView(t)["default/c1"]; ok {
				return fmt.Errorf("default/c1 is still held")
			}
			return nil
		})
		t.Logf("revoked cluster withdrawn %v after navectl returned", time.Since(start).Round(time.Millisecond))
		testwait.For(t, 10*time.Second, func() error {
			if !strings.Contains(s1.proc.Log(), "revoked") {
				return fmt.Errorf("the spoke's log does not say it was revoked")
			}
			return nil
		})
		creds, err := spokeenroll.Load(s1.state)
		if err != nil {
			t.Fatal(err)
		}
		_, err = pushClaiming(t, dialTLS(t, addr(h.spokes), h.servingRoots(t), &creds.Certificate), "default", "c1")
		wantCode(t, "the revoked cluster's certificate", err, codes.PermissionDenied, "revoked")
		if _, ok := h.spokesView(t)["default/c1"]; ok {
			t.Error("the revoked cluster came back")
		}
	})
}

// usedToken returns a join token for default/c3 that a spoke has redeemed
// (a token is printed once, so the test makes one and uses it).
func usedToken(t *testing.T, h *hub) string {
	t.Helper()
	tok := h.token(t, "default", "c3", "1h")
	s := startSecureSpoke(t, h, "spoke-c3", "", "c3", tok)
	harness.WaitReady(t, s.url("/healthz/ready"), 30*time.Second)
	h.waitSynced(t, "default/c3")
	s.proc.Stop(5 * time.Second)
	return tok
}

// forge keeps tok's id and replaces its secret with another of the same
// form.
func forge(t *testing.T, tok string) string {
	t.Helper()
	i := strings.LastIndex(tok, ".")
	secret := []byte(tok[i+1:])
	if secret[0] == 'A' {
		secret[0] = 'B'
	} else {
		secret[0] = 'A'
	}
	return tok[:i+1] + string(secret)
}
