package replica_test

import (
	"context"
	"crypto/tls"
	"net/url"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// TestRelayTakesOnlyReplicaCertificates: the relay listener serves a
// replica with its certificate from the hub's serving CA, and refuses the
// hub's own serving certificate, a replica-looking certificate of another
// CA, and a caller without a certificate.
func TestRelayTakesOnlyReplicaCertificates(t *testing.T) {
	ctx := context.Background()
	store, err := ca.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := servingcert.New(ctx, store, []string{"127.0.0.1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	idA, err := replica.NewIdentity(ctx, serving, "a")
	if err != nil {
		t.Fatal(err)
	}
	idB, err := replica.NewIdentity(ctx, serving, "b")
	if err != nil {
		t.Fatal(err)
	}
	in := ingest.NewOwnership(ingest.NewServer(ingest.NewStore(ingest.StoreOptions{StaleGracePeriod: time.Hour, Replicas: ingest.ReplicaFuncs{ID: "a"}}),
		ingest.ClaimedIdentity(), ingest.ServerOptions{}))
	lis := listen(t)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(idA.ServerConfig(nil, nil))))
	protocolv1.RegisterSyncServer(srv, replica.NewRelayServer(in, false, nil, nil))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	relay := func(cfg *tls.Config) error {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer conn.Close()
		md := metadata.Pairs(protocol.MetadataMesh, x.Mesh, protocol.MetadataCluster, x.Cluster,
			replica.MetadataOwner, "b", replica.MetadataEpoch, ingest.Epoch{At: time.Now().UnixNano(), Replica: "b"}.String())
		cctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, md), waitFor)
		defer cancel()
		st, err := protocolv1.NewSyncClient(conn).Push(cctx)
		if err != nil {
			return err
		}
		if err := st.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1"}); err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	if err := relay(idB.ClientConfig("a")); err != nil {
		t.Fatalf("replica b refused: %v", err)
	}
	if hs := in.Holdings(ingest.HoldingFilter{Only: x}); len(hs) != 1 || hs[0].Owner != "b" || !hs[0].Relayed {
		t.Errorf("b's relay not held: %+v", hs)
	}
	// b checks the server is replica a.
	if err := relay(idB.ClientConfig("c")); err == nil || !strings.Contains(err.Error(), "presented the certificate of replica a") {
		t.Errorf("b dialling c reached a: %v", err)
	}

	servingLeaf, err := serving.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	other := x509test.NewAuthority("not the serving CA")
	forged := other.ClientCert(time.Hour, &url.URL{Scheme: "spiffe", Host: servingcert.TrustDomain, Path: "/nave/replica/b"})
	base := idB.ClientConfig("a")
	for name, cert := range map[string]*tls.Certificate{"the hub's serving certificate": servingLeaf, "another CA's replica certificate": &forged, "no certificate": nil} {
		cfg := base.Clone()
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		}
		if err := relay(cfg); err == nil {
			t.Errorf("%s: relay accepted", name)
		}
	}
}
