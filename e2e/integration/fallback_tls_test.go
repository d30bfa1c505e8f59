package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/spoke/fallback"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// The fallback listener over mTLS with the hub's real CA: the spoke serves
// its cluster certificate, which a proxy verifies against the mesh roots
// and the cluster's SPIFFE ID; a proxy with a workload certificate of the
// mesh is served as that workload; one of another mesh, or naming another
// namespace than its certificate's, is refused.
func TestFallbackOverMTLSWithTheMeshCA(t *testing.T) {
	_, auth, renewer := realHub(t)
	rootsA, err := auth.RootsPEM(enrolltest.MeshA)
	if err != nil {
		t.Fatal(err)
	}
	trust := func() (string, []byte) { return enrolltest.TrustDomainA, rootsA }
	var hubUp atomic.Bool
	fb := fallback.New(fallback.Options{Mesh: enrolltest.MeshA, Cluster: raCluster, After: time.Millisecond, Tick: 5 * time.Millisecond,
		DebounceQuiet: 10 * time.Millisecond, DebounceMax: 50 * time.Millisecond,
		HubSynced: func() error {
			if hubUp.Load() {
				return nil
			}
			return errors.New("down")
		},
		ADS: ads.Options{Authenticator: fallback.Authenticator(enrolltest.MeshA, trust)}})
	fb.Update(pushctxtest.Decode(t, clusterA))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { fb.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	cert := func() (*tls.Certificate, error) { c := renewer.Credentials().Certificate; return &c, nil }
	addr := serveGRPCWith(t, []grpc.ServerOption{grpc.Creds(credentials.NewTLS(fallback.ServerTLS(cert, trust)))},
		func(s *grpc.Server) { discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, fb) })
	testwait.For(t, waitFor, func() error {
		if !fb.Active() {
			return errors.New("not active")
		}
		return nil
	})

	workload := func(mesh, td, ns, sa string) tls.Certificate {
		id, err := ca.WorkloadID(td, ns, sa)
		if err != nil {
			t.Fatal(err)
		}
		m, err := auth.Mint(t.Context(), mesh, ca.SignOptions{Identities: []ca.ID{id}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(m.ChainPEM, m.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// A proxy checks the server as Envoy does with match_typed_subject_alt_names:
	// the chain to the mesh roots, and the cluster's SPIFFE ID.
	wantServer, _ := spiffeid.ClusterID(enrolltest.TrustDomainA, raCluster)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootsA)
	dial := func(c tls.Certificate) discoveryv3.AggregatedDiscoveryServiceClient {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{c}, InsecureSkipVerify: true,
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
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
					return err
				}
				if len(leaf.URIs) != 1 || leaf.URIs[0].String() != wantServer.String() {
					return fmt.Errorf("server is %v, want %s", leaf.URIs, wantServer)
				}
				return nil
			}}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	}
	ask := func(client discoveryv3.AggregatedDiscoveryServiceClient, ns string) (*discoveryv3.DiscoveryResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		s, err := client.StreamAggregatedResources(ctx)
		if err != nil {
			return nil, err
		}
		n := &corev3.Node{Id: "p~" + ns, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"NAMESPACE": structpb.NewStringValue(ns)}}}
		if err := s.Send(&discoveryv3.DiscoveryRequest{Node: n, TypeUrl: typeurl.Cluster}); err != nil {
			return nil, err
		}
		return s.Recv()
	}

	good := dial(workload(enrolltest.MeshA, enrolltest.TrustDomainA, "demo", "client"))
	if r, err := ask(good, "demo"); err != nil || len(r.GetResources()) == 0 {
		t.Fatalf("workload of the mesh: %v, %v", r, err)
	}
	if _, err := ask(good, "other"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "namespace") {
		t.Fatalf("node naming another namespace: err = %v, want PermissionDenied", err)
	}
	foreign := dial(workload(enrolltest.MeshB, enrolltest.TrustDomainB, "demo", "client"))
	if _, err := ask(foreign, "demo"); err == nil || status.Code(err) == codes.OK {
		t.Fatal("a workload of another mesh was served")
	}
}

// serveGRPCWith is serveGRPC with server options.
func serveGRPCWith(t testing.TB, opts []grpc.ServerOption, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}
