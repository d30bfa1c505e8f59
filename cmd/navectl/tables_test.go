package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/mesh"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) time.Time { return now.Add(-d) }
func at(t time.Time) *time.Time     { return &t }

// The status table: every cluster state, rejections, conflicts, problems
// and a replicas section.
func TestStatusTable(t *testing.T) {
	meshes := []meshView{
		{Mesh: "acme", Version: 42, Services: 7,
			Conflicts: []mesh.Conflict{{Kind: "VirtualService", Key: "shop/reviews", WinnerCluster: "east", LoserCluster: "west", Reason: "defined differently; east's is older (2026-01-01T00:00:00Z)"}},
			Problems:  []mesh.Problem{{Resource: "west:VirtualService shop/broken", Field: "spec.http[0].route[0].destination.subset", Reason: "subset v9 is not defined"}}},
		{Mesh: "globex", Version: 3, Services: 1},
	}
	spokes := []ingest.ClusterStatus{
		{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "acme", Cluster: "east"}, Connected: true, Synced: true, LastMessageAt: ago(5 * time.Second)},
			Resources: map[string]int{"VirtualService": 2, "Service": 5}},
		{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "acme", Cluster: "west"}, LastMessageAt: ago(3 * time.Minute)}, Stale: true, WithdrawAt: at(now.Add(2 * time.Minute)),
			Resources: map[string]int{"VirtualService": 1},
			Rejected:  []meshconfig.Rejection{{File: "routes.yaml", Index: 2, Kind: "VirtualService", Namespace: "shop", Name: "bad", Field: "spec.http[0].route", Reason: "weights sum to 90, want 100"}}},
		{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "acme", Cluster: "north"}, Connected: true, LastMessageAt: ago(time.Second)}},
		{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "globex", Cluster: "old"}}, Withdrawn: &ingest.Withdrawal{At: ago(3 * time.Hour), Reason: "grace period over", Resources: 4}},
		{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "globex", Cluster: "new"}}, Missing: at(ago(10 * time.Minute))},
	}
	rep := buildStatus(meshes, spokes)
	rep.Replicas = []any{map[string]any{"name": "hub-0", "state": "alive", "spokes": 2.0}, map[string]any{"name": "hub-1", "state": "suspect"}}
	var b bytes.Buffer
	if err := writeStatus(&b, rep, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "status.txt", b.String())
}

// A mesh being deleted says so; an Active one, created at runtime and
// without a push context yet, is listed as it is.
func TestStatusShowsAMeshBeingDeleted(t *testing.T) {
	rep := buildStatus([]meshView{{Mesh: "gone", Phase: "Deleting", Version: 4}, {Mesh: "new", Phase: "Active"}}, nil)
	if len(rep.Meshes) != 2 || rep.Meshes[0].Phase != "Deleting" || rep.Meshes[1].Phase != "" {
		t.Fatalf("meshes %+v; want gone Deleting, new with no phase shown", rep.Meshes)
	}
	var b bytes.Buffer
	if err := writeStatus(&b, rep, now); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "gone (Deleting)") || strings.Contains(out, "Active") || !strings.Contains(out, "new ") {
		t.Errorf("status:\n%s", out)
	}
}

func TestProxyStatusTables(t *testing.T) {
	sent := func(v string) ads.TypeStatus {
		return ads.TypeStatus{Wildcard: true, SentVersion: v, SentResources: 3, SentAt: ago(7 * time.Second), AckedVersion: v}
	}
	conns := []ads.ConnStatus{
		{ID: "sidecar~10.0.0.1~web-1.shop~shop.svc.cluster.local-1", NodeID: "sidecar~10.0.0.1~web-1.shop~shop.svc.cluster.local", Mesh: "acme", ProxyType: "sidecar",
			Namespace: "shop", Peer: "10.0.0.1:43210", ConnectedAt: ago(time.Hour), Types: map[string]ads.TypeStatus{
				"Cluster":               sent("7"),
				"Listener":              {SentVersion: "7", SentResources: 2, SentAt: ago(time.Second), AckedVersion: "6", NackedVersion: "7", NackReason: "listener 0.0.0.0_9080: duplicate filter chain"},
				"ClusterLoadAssignment": {Subscribed: 4, SentVersion: "8", SentResources: 4, SentAt: ago(time.Second), AckedVersion: "7", Pending: true},
			}},
		{ID: "grpc-client-2", NodeID: "grpc-client", Mesh: "acme", ProxyType: "grpc", Delta: true, ConnectedAt: ago(90 * time.Second), Types: map[string]ads.TypeStatus{
			"Listener": sent("3"), "RouteConfiguration": sent("3"), "Cluster": sent("3"), "ClusterLoadAssignment": sent("3")}},
		// web-1's agent's name-table stream (DNS proxying): no proxy type is served on it.
		{ID: "sidecar~10.0.0.1~web-1.shop~shop.svc.cluster.local-3", NodeID: "sidecar~10.0.0.1~web-1.shop~shop.svc.cluster.local", Mesh: "acme",
			ProxyType: "sidecar", NameTable: true, ConnectedAt: ago(time.Hour), Types: map[string]ads.TypeStatus{"NameTable": sent("2")}},
	}
	ps := proxyStatuses(conns)
	var b bytes.Buffer
	if err := writeProxyStatus(&b, ps); err != nil {
		t.Fatal(err)
	}
	golden(t, "proxy-status.txt", b.String())
	b.Reset()
	if err := writeProxyDetail(&b, ps[0], now); err != nil {
		t.Fatal(err)
	}
	golden(t, "proxy-status-detail.txt", b.String())
	if c, err := findProxy(conns, "web-1.shop"); err != nil || c.ID != conns[0].ID {
		t.Errorf("findProxy(web-1.shop) = %s, %v", c.ID, err)
	}
	if _, err := findProxy(conns, "c"); err == nil {
		t.Error("findProxy of a part of two node IDs did not fail")
	}
}

// protoJSON renders messages as the hub's /debug/config does.
func protoJSON(t *testing.T, msgs ...proto.Message) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range msgs {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var r map[string]any
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestProxyConfigTables(t *testing.T) {
	sock := func(addr string, port uint32) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
	}
	roots, err := os.ReadFile("testdata/workload-cert.pem") // a fixed certificate of spiffe://cluster.local/ns/shop/sa/web
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string][]proto.Message{
		"clusters": {
			&clusterv3.Cluster{Name: "outbound|9080||reviews.shop.svc.cluster.local", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
				TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls"}},
			&clusterv3.Cluster{Name: "BlackHoleCluster"},
		},
		"listeners": {
			&listenerv3.Listener{Name: "0.0.0.0_9080", Address: sock("0.0.0.0", 9080), FilterChains: []*listenerv3.FilterChain{{}, {}}},
			&listenerv3.Listener{Name: "reviews.shop.svc.cluster.local:9080", ApiListener: &listenerv3.ApiListener{}},
		},
		"routes": {&routev3.RouteConfiguration{Name: "9080", VirtualHosts: []*routev3.VirtualHost{
			{Name: "reviews.shop.svc.cluster.local:9080", Domains: []string{"reviews.shop.svc.cluster.local", "reviews", "reviews.shop", "reviews.shop.svc", "10.96.0.12"}, Routes: []*routev3.Route{{}, {}}},
			{Name: "allow_any", Domains: []string{"*"}, Routes: []*routev3.Route{{}}},
		}}},
		"endpoints": {&endpointv3.ClusterLoadAssignment{ClusterName: "outbound|9080||reviews.shop.svc.cluster.local", Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality: &corev3.Locality{Region: "eu", Zone: "eu-1"},
			LbEndpoints: []*endpointv3.LbEndpoint{
				{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: sock("10.1.0.5", 9080)}}, HealthStatus: corev3.HealthStatus_HEALTHY, LoadBalancingWeight: wrapperspb.UInt32(1)},
				// No weight, as the hub sends a weight of 1 (decision 055).
				{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: sock("10.2.0.9", 9080)}}},
			}}}}},
		"secrets": {
			&tlsv3.Secret{Name: "default", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
				CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: roots}}}}},
			&tlsv3.Secret{Name: "ROOTCA", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: roots}}}}},
		},
	}
	var b bytes.Buffer
	for _, k := range configKinds {
		b.WriteString("== " + k.arg + "\n")
		if err := writeConfigTable(&b, k, protoJSON(t, resources[k.arg]...)); err != nil {
			t.Fatal(err)
		}
	}
	golden(t, "proxy-config.txt", b.String())
}
