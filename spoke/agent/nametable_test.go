package agent

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/internal/x509test"
	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
	"github.com/navemesh/nave/shared/retry"
	"github.com/navemesh/nave/shared/tlsconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/spoke/agentconfig"
)

// adsStub is an ADS server that hands each stream to the test: the test
// reads the requests and sends the responses.
type adsStub struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	streams chan *stubStream
}

// stubStream is one stream: its requests in order, its end.
type stubStream struct {
	srv  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	reqs chan *discoveryv3.DiscoveryRequest
	end  chan error // the test ends the stream by sending on it
}

func (a *adsStub) StreamAggregatedResources(srv discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	s := &stubStream{srv: srv, reqs: make(chan *discoveryv3.DiscoveryRequest, 16), end: make(chan error)}
	go func() {
		for {
			r, err := srv.Recv()
			if err != nil {
				close(s.reqs)
				return
			}
			s.reqs <- r
		}
	}()
	select {
	case a.streams <- s:
	case <-srv.Context().Done():
		return nil
	}
	select {
	case err := <-s.end:
		return err
	case <-srv.Context().Done():
		return nil
	}
}

// next is the stream's next request.
func (s *stubStream) next(t *testing.T) *discoveryv3.DiscoveryRequest {
	t.Helper()
	select {
	case r, ok := <-s.reqs:
		if !ok {
			t.Fatal("the stream ended before the request")
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no request within 30s")
	}
	return nil
}

// send sends the resources as version, with nonce.
func (s *stubStream) send(t *testing.T, version, nonce string, resources ...*anypb.Any) {
	t.Helper()
	if err := s.srv.Send(&discoveryv3.DiscoveryResponse{TypeUrl: typeurl.NameTable, VersionInfo: version, Nonce: nonce, Resources: resources}); err != nil {
		t.Fatal(err)
	}
}

// startADSStub serves the stub over TLS with a server certificate of ca
// for "hub", asking for a client certificate of ca.
func startADSStub(t *testing.T, ca *x509test.Authority) (*adsStub, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := tlsconfig.MutualServer(tlsconfig.Foreign, tlsconfig.Static(ca.ServerCert("hub")), tls.RequireAndVerifyClientCert, ca.Pool())
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(conf)))
	stub := &adsStub{streams: make(chan *stubStream, 4)}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, stub)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return stub, lis.Addr().String()
}

func (a *adsStub) stream(t *testing.T) *stubStream {
	t.Helper()
	select {
	case s := <-a.streams:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no stream within 30s")
	}
	return nil
}

func tableAny(t *testing.T, hosts map[string]string) *anypb.Any {
	t.Helper()
	nt := &ndsv1.NameTable{Table: map[string]*ndsv1.NameTable_NameInfo{}}
	for h, ip := range hosts {
		nt.Table[h] = &ndsv1.NameTable_NameInfo{Ips: []string{ip}, Registry: "External"}
	}
	a, err := anypb.New(nt)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type applied struct {
	nt      *ndsv1.NameTable
	version string
}

// TestNameTableStream: the agent subscribes to the name table as its
// Envoy's node with no names, puts each good table in place and ACKs it,
// NACKs a bad one keeping the last good, and after the stream breaks
// subscribes again from the last good version.
func TestNameTableStream(t *testing.T) {
	ca := x509test.NewAuthority("test")
	stub, addr := startADSStub(t, ca)
	cred := testCredential(t, ca, time.Hour)
	pair, err := tls.X509KeyPair(cred.ChainPEM, cred.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan applied, 4)
	node := &corev3.Node{Id: "sidecar~10.0.0.1~web-1.demo~demo.svc.cluster.local", Cluster: "web.demo"}
	n, err := NewNameTableStream(NameTableOptions{Address: addr, ServerName: "hub", Roots: ca.Pool(), Certificate: tlsconfig.Static(pair), Node: node,
		Apply:   func(nt *ndsv1.NameTable, v string) { got <- applied{nt, v} },
		Backoff: retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond}, Log: discard()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})

	s := stub.stream(t)
	first := s.next(t)
	if first.GetTypeUrl() != typeurl.NameTable || len(first.GetResourceNames()) != 0 || first.GetNode().GetId() != node.GetId() ||
		first.GetVersionInfo() != "" || first.GetResponseNonce() != "" {
		t.Fatalf("first request %v; want a wildcard NameTable subscription as the node, no version", first)
	}
	s.send(t, "v1", "n1", tableAny(t, map[string]string{"a.mesh": "240.240.0.1"}))
	a := <-got
	if a.version != "v1" || a.nt.GetTable()["a.mesh"].GetIps()[0] != "240.240.0.1" {
		t.Fatalf("applied %v", a)
	}
	if ack := s.next(t); ack.GetVersionInfo() != "v1" || ack.GetResponseNonce() != "n1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ACK %v", ack)
	}

	// A resource that is not a name table: NACKed, v1 stays.
	s.send(t, "v2", "n2", &anypb.Any{TypeUrl: typeurl.NameTable, Value: []byte{0xff, 0xff}})
	nack := s.next(t)
	if nack.GetVersionInfo() != "v1" || nack.GetResponseNonce() != "n2" || nack.GetErrorDetail() == nil {
		t.Fatalf("NACK %v; want version v1, nonce n2, an error", nack)
	}
	// Two resources: merged (the agent does not depend on the names).
	s.send(t, "v3", "n3", tableAny(t, map[string]string{"b.mesh": "240.240.0.2"}), tableAny(t, map[string]string{"c.mesh": "240.240.0.3"}))
	if a := <-got; a.version != "v3" || len(a.nt.GetTable()) != 2 {
		t.Fatalf("applied %v; want v3 with both resources' hosts", a)
	}
	if ack := s.next(t); ack.GetVersionInfo() != "v3" {
		t.Fatalf("ACK %v", ack)
	}
	if v := n.View(); v.Version != "v3" || v.ACKs != 2 || v.NACKs != 1 || !v.Connected {
		t.Errorf("view %+v", v)
	}

	// The hub drops the stream: a new one starts from v3.
	s.end <- nil
	s2 := stub.stream(t)
	if r := s2.next(t); r.GetVersionInfo() != "v3" || r.GetNode().GetId() != node.GetId() || r.GetTypeUrl() != typeurl.NameTable {
		t.Fatalf("resubscription %v; want from v3, as the node", r)
	}
	select {
	case a := <-got:
		t.Fatalf("a table %v was applied without an answer", a)
	default:
	}
}

// TestBootstrapNode: the stream's node is the Envoy bootstrap's, DNS
// capture metadata included.
func TestBootstrapNode(t *testing.T) {
	cfg := testConfig("envoy")
	cfg.ProxyType = agentconfig.ProxySidecar
	cfg.ProxyMetadata = `{"ISTIO_META_DNS_CAPTURE":"True"}`
	boot, err := Bootstrap(cfg, map[string]string{"app": "web"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	node, err := bootstrapNode(boot)
	if err != nil {
		t.Fatal(err)
	}
	if node.GetId() == "" || node.GetCluster() != "web."+cfg.Pod.Namespace || node.GetMetadata().GetFields()["DNS_CAPTURE"].GetStringValue() != "true" {
		t.Errorf("node %v; want the bootstrap's id, cluster and DNS_CAPTURE true", node)
	}
	cfg.Mode = agentconfig.ModeGRPC
	if cfg.DNSCapture() {
		t.Error("a grpc-mode agent would answer DNS")
	}
}
