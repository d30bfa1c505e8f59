package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/navemesh/nave/internal/x509test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// staticADS is a minimal state-of-the-world ADS server with a fixed set of resources,
// standing in for the hub at the edge of this test: it answers each subscription once
// with the resources named, and remembers the node and any NACK. Safe for concurrent use.
type staticADS struct {
	discoverypb.UnimplementedAggregatedDiscoveryServiceServer
	resources map[string]map[string]proto.Message // type URL, then name

	mu    sync.Mutex
	nodes []*corepb.Node
	nacks []string
	peers []string // the URI SANs of the client certificates the streams came with
}

func (s *staticADS) StreamAggregatedResources(stream discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	if p, ok := peer.FromContext(stream.Context()); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			s.mu.Lock()
			for _, u := range info.State.PeerCertificates[0].URIs {
				s.peers = append(s.peers, u.String())
			}
			s.mu.Unlock()
		}
	}
	answered := map[string]string{} // type URL to the names last answered
	nonce := 0
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		s.mu.Lock()
		if req.GetNode() != nil {
			s.nodes = append(s.nodes, req.GetNode())
		}
		if req.GetErrorDetail() != nil {
			s.nacks = append(s.nacks, fmt.Sprintf("%s: %s", req.GetTypeUrl(), req.GetErrorDetail().GetMessage()))
		}
		s.mu.Unlock()

		names := slices.Sorted(slices.Values(req.GetResourceNames()))
		key := strings.Join(names, ",")
		if prev, ok := answered[req.GetTypeUrl()]; ok && prev == key {
			continue // an ACK or NACK of what was sent
		}
		answered[req.GetTypeUrl()] = key
		nonce++
		resp := &discoverypb.DiscoveryResponse{TypeUrl: req.GetTypeUrl(), VersionInfo: "1", Nonce: strconv.Itoa(nonce)}
		for _, name := range names {
			if r, ok := s.resources[req.GetTypeUrl()][name]; ok {
				a, err := anypb.New(r)
				if err != nil {
					return err
				}
				resp.Resources = append(resp.Resources, a)
			}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (s *staticADS) seen() ([]*corepb.Node, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.nodes), slices.Clone(s.nacks)
}

func (s *staticADS) seenPeers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.peers)
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// echoResources is the xDS for the demo's echo service that a proxyless gRPC client
// needs: x-user=beta to echo-v3, everything else split evenly between echo-v1 and echo-v2.
func echoResources(t *testing.T, ports map[string]uint32) map[string]map[string]proto.Message {
	t.Helper()
	const (
		host   = "echo.demo.svc.cluster.local"
		routes = "echo-routes"
	)
	ads := &corepb.ConfigSource{
		ResourceApiVersion:    corepb.ApiVersion_V3,
		ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
	}
	hcm := &hcmpb.HttpConnectionManager{
		RouteSpecifier: &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{ConfigSource: ads, RouteConfigName: routes}},
		HttpFilters: []*hcmpb.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerpb.Router{})},
		}},
	}
	prefix := &routepb.RouteMatch_Prefix{Prefix: "/"}
	route := &routepb.RouteConfiguration{
		Name: routes,
		VirtualHosts: []*routepb.VirtualHost{{
			Name:    host,
			Domains: []string{host + ":7070", host},
			Routes: []*routepb.Route{
				{
					Match: &routepb.RouteMatch{PathSpecifier: prefix, Headers: []*routepb.HeaderMatcher{{
						Name: "x-user",
						HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{
							MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "beta"},
						}},
					}}},
					Action: &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "echo-v3"}}},
				},
				{
					Match: &routepb.RouteMatch{PathSpecifier: prefix},
					Action: &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_WeightedClusters{
						WeightedClusters: &routepb.WeightedCluster{Clusters: []*routepb.WeightedCluster_ClusterWeight{
							{Name: "echo-v1", Weight: wrapperspb.UInt32(50)},
							{Name: "echo-v2", Weight: wrapperspb.UInt32(50)},
						}},
					}}},
				},
			},
		}},
	}
	res := map[string]map[string]proto.Message{
		"type.googleapis.com/envoy.config.listener.v3.Listener": {
			host + ":7070": &listenerpb.Listener{Name: host + ":7070", ApiListener: &listenerpb.ApiListener{ApiListener: mustAny(t, hcm)}},
		},
		"type.googleapis.com/envoy.config.route.v3.RouteConfiguration":       {routes: route},
		"type.googleapis.com/envoy.config.cluster.v3.Cluster":                {},
		"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment": {},
	}
	for name, port := range ports {
		res["type.googleapis.com/envoy.config.cluster.v3.Cluster"][name] = &clusterpb.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_EDS},
			EdsClusterConfig:     &clusterpb.Cluster_EdsClusterConfig{EdsConfig: ads, ServiceName: name},
			LbPolicy:             clusterpb.Cluster_ROUND_ROBIN,
		}
		res["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"][name] = &endpointpb.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointpb.LocalityLbEndpoints{{
				Locality:            &corepb.Locality{Region: "us-east", Zone: "zone-a"},
				LoadBalancingWeight: wrapperspb.UInt32(1),
				LbEndpoints: []*endpointpb.LbEndpoint{{
					HostIdentifier: &endpointpb.LbEndpoint_Endpoint{Endpoint: &endpointpb.Endpoint{
						Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
							Address:       "127.0.0.1",
							PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: port},
						}}},
					}},
					HealthStatus: corepb.HealthStatus_HEALTHY,
				}},
			}},
		}
	}
	return res
}

func port(t *testing.T, addr string) uint32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(n)
}

// echoADS starts the three echo backends and an ADS server, with opts, that routes to them.
func echoADS(t *testing.T, opts ...grpc.ServerOption) (*staticADS, string) {
	t.Helper()
	ports := map[string]uint32{}
	for _, name := range []string{"echo-v1", "echo-v2", "echo-v3"} {
		ports[name] = port(t, startBackend(t, name).addr)
	}
	ads := &staticADS{resources: echoResources(t, ports)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	discoverypb.RegisterAggregatedDiscoveryServiceServer(srv, ads)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return ads, lis.Addr().String()
}

// xdsCalls runs the client against the ADS server at hub, with --json and args, and
// returns its calls: by backend, and those that failed.
func xdsCalls(t *testing.T, hub string, count int, args ...string) (byBackend map[string]int, failed []callLine) {
	t.Helper()
	args = append([]string{"--hub", hub, "--node-id", "test-client.demo", "--json",
		"--count", strconv.Itoa(count), "--interval", "5ms", "--timeout", "10s"}, args...)
	cmd := clientCommand(t, args...)
	cmd.Env = append(cmd.Env, bootstrapFileEnv+"=", bootstrapContentEnv+"=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client %q: %v, stderr %s", args, err, stderr.String())
	}
	byBackend = map[string]int{}
	for _, l := range decodeLines(t, out) {
		if l.Code != "OK" {
			failed = append(failed, l)
		}
		byBackend[l.Backend]++
	}
	return byBackend, failed
}

// TestProcessRoutesThroughXDS runs the client the way the demo does, with --hub and
// --node-id, so it must hand grpc a bootstrap it made itself, and checks that the calls
// follow the routes the ADS server gave it.
func TestProcessRoutesThroughXDS(t *testing.T) {
	ads, hub := echoADS(t)
	calls := func(args ...string) map[string]int {
		t.Helper()
		byBackend, failed := xdsCalls(t, hub, 40, args...)
		for _, l := range failed {
			t.Errorf("call %d: %s %s", l.Seq, l.Code, l.Error)
		}
		return byBackend
	}

	beta := calls("--header", "x-user=beta")
	if beta["echo-v3"] != 40 {
		t.Errorf("x-user=beta calls went to %v, want all 40 to echo-v3", beta)
	}
	// Each of v1 and v2 has even odds per call: missing one in 40 calls has odds 2^-39.
	split := calls()
	if split["echo-v1"] == 0 || split["echo-v2"] == 0 || split["echo-v1"]+split["echo-v2"] != 40 {
		t.Errorf("calls without x-user went to %v, want 40 split between echo-v1 and echo-v2", split)
	}

	nodes, nacks := ads.seen()
	if len(nacks) > 0 {
		t.Errorf("client NACKed: %q", nacks)
	}
	if len(nodes) == 0 {
		t.Fatal("the ADS server saw no node")
	}
	if n := nodes[0]; n.GetId() != "test-client.demo" || n.GetMetadata().GetFields()["MESH"].GetStringValue() != "default" ||
		n.GetMetadata().GetFields()["NAMESPACE"].GetStringValue() != "demo" {
		t.Errorf("node %v, want id test-client.demo with MESH=default NAMESPACE=demo", n)
	}
}

// TestProcessRoutesThroughXDSOverMTLS runs the client with --xds-cert-dir against an ADS
// server that, as the hub's, serves TLS for 127.0.0.1 under its own serving CA and
// requires a client certificate of the mesh's CA: the client must verify the server
// with --xds-ca-file and present its workload certificate.
func TestProcessRoutesThroughXDSOverMTLS(t *testing.T) {
	hubCA, meshCA := x509test.NewAuthority("hub serving CA"), x509test.NewAuthority("mesh root")
	serving := hubCA.ServerCert("localhost")
	ads, hub := echoADS(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    meshCA.Pool(),
		MinVersion:   tls.VersionTLS12,
	})))
	const id = "spiffe://cluster.local/ns/demo/sa/demo-client"
	certDir := writeCertDir(t, meshCA, id, time.Hour)
	hubCAFile := filepath.Join(t.TempDir(), "hub-ca.pem")
	if err := os.WriteFile(hubCAFile, hubCA.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}

	byBackend, failed := xdsCalls(t, hub, 10, "--xds-cert-dir", certDir, "--xds-ca-file", hubCAFile, "--header", "x-user=beta")
	if byBackend["echo-v3"] != 10 || len(failed) > 0 {
		t.Errorf("calls over mTLS went to %v (failed: %+v), want all 10 to echo-v3", byBackend, failed)
	}
	if peers := ads.seenPeers(); len(peers) == 0 || peers[0] != id {
		t.Errorf("the ADS server saw client certificates %q, want %s", peers, id)
	}

	// A client that does not trust the hub's CA (here: the mesh's root in its place)
	// never gets its config: every call fails and none reaches a backend. Why is known
	// once its xDS channel has failed the handshake, and then names the CA; a call that
	// ends before may say something else (grpc's xDS resolver shows "name resolver
	// error: produced zero addresses" for an instant before the error behind it), so
	// only the last call, made after the first one ended, must name the CA.
	meshRootFile := filepath.Join(t.TempDir(), "root-cert.pem")
	if err := os.WriteFile(meshRootFile, meshCA.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	const calls = 3
	byBackend, failed = xdsCalls(t, hub, calls, "--xds-cert-dir", certDir, "--xds-ca-file", meshRootFile)
	if len(failed) != calls || len(byBackend) != 1 || byBackend[""] != calls {
		t.Errorf("calls trusting the wrong CA went to %v (failed: %+v), want all %d to fail without a backend", byBackend, failed, calls)
	}
	if len(failed) == 0 || !strings.Contains(failed[len(failed)-1].Error, "certificate signed by unknown authority") {
		t.Errorf("calls trusting the wrong CA failed with %+v, want the last to name the hub's unknown CA", failed)
	}
}
