package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
)

// An enrolled nave-spoke with fallback on serves its fallback listener
// over mTLS with its cluster certificate: a proxy verifies it against the
// mesh roots and the cluster's SPIFFE ID; a proxy without a workload
// certificate of the mesh cannot connect; one with it is answered
// UNAVAILABLE while the hub serves.
func TestFallbackListenerServesTheClusterCertificate(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, _ := tokenFile(t, h, enrolltest.MeshA, "east")
	fb := addr(harness.FreePort(t))
	startIdentitySpoke(t, append(tlsArgs(h, "east", t.TempDir()), "--hub.token-file="+token,
		"--fallback.enabled", "--fallback.listen="+fb)...)
	hubHolds(t, h, "east")

	meshCA := h.CA.Authority(enrolltest.MeshA)
	var served *x509.Certificate
	dial := func(certs []tls.Certificate) error {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: certs, InsecureSkipVerify: true,
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				leaf, err := x509.ParseCertificate(raw[0])
				if err != nil {
					return err
				}
				inter := x509.NewCertPool()
				for _, r := range raw[1:] {
					if c, err := x509.ParseCertificate(r); err == nil {
						inter.AddCert(c)
					}
				}
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: meshCA.Pool(), Intermediates: inter}); err != nil {
					return err
				}
				served = leaf
				return nil
			}}
		conn, err := grpc.NewClient(fb, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), identityWait)
		defer cancel()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	workload, _ := url.Parse("spiffe://" + enrolltest.TrustDomainA + "/ns/demo/sa/client")
	harness.Eventually(t, identityWait, func() error {
		err := dial([]tls.Certificate{meshCA.ClientCert(time.Hour, workload)})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "hub is serving") {
			return fmt.Errorf("workload of the mesh: err = %v, want UNAVAILABLE while the hub serves", err)
		}
		return nil
	})
	if served == nil || len(served.URIs) != 1 || served.URIs[0].String() != "spiffe://"+enrolltest.TrustDomainA+"/nave/cluster/east" {
		t.Fatalf("fallback listener serves %v, want the cluster certificate", served)
	}
	if err := dial(nil); err == nil || status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "hub is serving") {
		t.Fatalf("no client certificate: err = %v, want a refused handshake", err)
	}
	foreign := enrolltest.NewCA().AddMesh("other", "other.example")
	if err := dial([]tls.Certificate{foreign.ClientCert(time.Hour, workload)}); err == nil || strings.Contains(err.Error(), "hub is serving") {
		t.Fatalf("foreign CA's certificate: err = %v, want a refused handshake", err)
	}
}
