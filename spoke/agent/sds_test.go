package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/typeurl"
)

// startSDS serves s on a socket in a temp dir and returns a client.
func startSDS(t *testing.T, s *SDS) secretv3.SecretDiscoveryServiceClient {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "sds.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, sock) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	// Serve creates the socket on its own goroutine: calls wait for the
	// connection to become ready rather than failing while it does not exist.
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return secretv3.NewSecretDiscoveryServiceClient(conn)
}

func recvSecrets(t *testing.T, stream secretv3.SecretDiscoveryService_StreamSecretsClient) (*discoveryv3.DiscoveryResponse, map[string]*tlsv3.Secret) {
	t.Helper()
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tlsv3.Secret{}
	for _, a := range resp.GetResources() {
		s := &tlsv3.Secret{}
		if err := a.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		out[s.GetName()] = s
	}
	return resp, out
}

func TestSDSServesAndPushes(t *testing.T) {
	ca := x509test.NewAuthority("mesh")
	s := NewSDS(discard(), nil)
	client := startSDS(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, err := client.FetchSecrets(ctx, &discoveryv3.DiscoveryRequest{}, grpc.WaitForReady(true)); status.Code(err) != codes.Unavailable {
		t.Errorf("FetchSecrets before a credential: %v; want Unavailable", err)
	}
	stream, err := client.StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: []string{"default", "ROOTCA", "unknown"}}); err != nil {
		t.Fatal(err)
	}
	// The stream waits for the first credential.
	first := testCredential(t, ca, time.Hour)
	if err := s.Update(first); err != nil {
		t.Fatal(err)
	}
	resp, secrets := recvSecrets(t, stream)
	if resp.GetVersionInfo() != first.Serial() || len(secrets) != 2 ||
		string(secrets["default"].GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != string(first.KeyPEM) ||
		string(secrets["ROOTCA"].GetValidationContext().GetTrustedCa().GetInlineBytes()) != string(ca.PEM()) {
		t.Fatalf("first response version %s with %d secrets; want default and ROOTCA of serial %s", resp.GetVersionInfo(), len(secrets), first.Serial())
	}
	// ACK, then renew: pushed on the open stream.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: []string{"default", "ROOTCA", "unknown"},
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	second := testCredential(t, ca, time.Hour)
	_ = s.Update(second)
	resp2, secrets2 := recvSecrets(t, stream)
	if resp2.GetVersionInfo() != second.Serial() || resp2.GetNonce() == resp.GetNonce() ||
		string(secrets2["default"].GetTlsCertificate().GetCertificateChain().GetInlineBytes()) != string(second.ChainPEM) {
		t.Fatalf("push after renewal: version %s; want %s with its chain", resp2.GetVersionInfo(), second.Serial())
	}
	// Asking for fewer names answers them alone.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: []string{"ROOTCA"},
		VersionInfo: resp2.GetVersionInfo(), ResponseNonce: resp2.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if _, only := recvSecrets(t, stream); len(only) != 1 || only["ROOTCA"] == nil {
		t.Errorf("after asking for ROOTCA alone: %v", only)
	}
	got, err := client.FetchSecrets(ctx, &discoveryv3.DiscoveryRequest{ResourceNames: []string{"default"}})
	if err != nil || len(got.GetResources()) != 1 || got.GetVersionInfo() != second.Serial() {
		t.Errorf("FetchSecrets: %v (%v)", got, err)
	}
	// Another type on the stream is refused.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Prefix + "envoy.config.cluster.v3.Cluster"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a cluster request: %v; want InvalidArgument", err)
	}
}

// TestSDSCredentialNames: the names Envoy asks for beyond default and
// ROOTCA reach WantCredentials (the union over streams), and the secrets
// SetCredentials then holds are served on the streams asking, pushed again
// when they change.
func TestSDSCredentialNames(t *testing.T) {
	s := NewSDS(discard(), nil)
	wanted := make(chan []string, 8)
	s.WantCredentials(func(names []string) { wanted <- names })
	if got := <-wanted; len(got) != 0 {
		t.Fatalf("wanted %v before any stream", got)
	}
	client := startSDS(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := client.StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: []string{"web-cert", "default", "web-cert-cacert"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-wanted:
		if strings.Join(got, ",") != "web-cert,web-cert-cacert" {
			t.Fatalf("wanted %v, want web-cert and web-cert-cacert", got)
		}
	case <-ctx.Done():
		t.Fatal("the stream's names never reached WantCredentials")
	}
	secret := func(name, version string) credentialSecret {
		a, err := anypb.New(&tlsv3.Secret{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return credentialSecret{secret: a, version: version}
	}
	s.SetCredentials(map[string]credentialSecret{"web-cert": secret("web-cert", "v1"), "other": secret("other", "v1")})
	resp, got := recvSecrets(t, stream)
	if len(got) != 1 || got["web-cert"] == nil || resp.GetVersionInfo() != "v1" {
		t.Fatalf("served %v at %s; want web-cert alone (no workload certificate yet, other unasked)", got, resp.GetVersionInfo())
	}
	s.SetCredentials(map[string]credentialSecret{"web-cert": secret("web-cert", "v2"), "web-cert-cacert": secret("web-cert-cacert", "v1")})
	if resp, got := recvSecrets(t, stream); len(got) != 2 || resp.GetVersionInfo() != "v2,v1" {
		t.Fatalf("after rotation: %v at %s", got, resp.GetVersionInfo())
	}
	cancel()
	select {
	case got := <-wanted:
		if len(got) != 0 {
			t.Errorf("wanted %v after the stream ended", got)
		}
	case <-time.After(20 * time.Second):
		t.Error("the stream's end never reached WantCredentials")
	}
}
