package ads_test

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/shared/meshlimits"
	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

const ndsEntryYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: demo}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 9000, name: tcp, protocol: TCP}]
`

const ndsEntry2YAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.example.com]
  addresses: [10.9.9.9]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 5432, name: tcp, protocol: TCP}]
`

// captureNode is a sidecar's node whose agent captures DNS.
func captureNode(id string) *corev3.Node {
	return &corev3.Node{Id: id, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		ads.MetadataMesh: structpb.NewStringValue("m"),
		"DNS_CAPTURE":    structpb.NewStringValue("true"),
	}}}
}

// table decodes a name table response's one resource.
func table(t *testing.T, resp *discoveryv3.DiscoveryResponse) map[string]*ndsv1.NameTable_NameInfo {
	t.Helper()
	if len(resp.GetResources()) != 1 {
		t.Fatalf("name table response holds %d resources, want 1", len(resp.GetResources()))
	}
	var nt ndsv1.NameTable
	if err := resp.GetResources()[0].UnmarshalTo(&nt); err != nil {
		t.Fatal(err)
	}
	return nt.GetTable()
}

// TestNameTableServedToAnAgentStream: an agent's stream (the node of its
// Envoy, asking only for the name table, wildcard) gets one NameTable with
// the ServiceEntry host's auto-allocated address, an update when another
// ServiceEntry is added, nothing for a change the table does not read, and
// nothing of Envoy's types; it is not counted among the mesh's proxies.
func TestNameTableServedToAnAgentStream(t *testing.T) {
	f := newFixture(t, nil)
	echo := pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN")
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, echo+"---"+ndsEntryYAML)))

	const id = "sidecar~10.0.0.5~app-1.demo~demo.svc.cluster.local"
	agent := f.connect(t, captureNode(id))
	agent.Subscribe(typeurl.NameTable)
	first := agent.Next(typeurl.NameTable)
	got := table(t, first)
	api := got["api.example.com"]
	if api == nil || len(api.GetIps()) != 1 || !strings.HasPrefix(api.GetIps()[0], "240.240.") || api.GetRegistry() != "External" {
		t.Fatalf("api.example.com in the table = %v; want one 240.240.0.0/16 address, registry External (table %v)", api, got)
	}
	agent.ACK(first)
	cs := f.connStatus(t, id)
	if !cs.NameTable {
		t.Errorf("the agent's stream is not marked as a name-table stream: %+v", cs)
	}

	// The agent asks for listeners: a name-table stream gets nothing else.
	agent.Subscribe(typeurl.Listener)

	// Weights change routes only: the table is not sent again.
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(20, 80, "ROUND_ROBIN")+"---"+ndsEntryYAML)))
	// A new ServiceEntry changes the table.
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(20, 80, "ROUND_ROBIN")+"---"+ndsEntryYAML+"---"+ndsEntry2YAML)))
	next := agent.Next(typeurl.NameTable) // Next fails on a response of another type
	got = table(t, next)
	if db := got["db.example.com"]; db == nil || strings.Join(db.GetIps(), ",") != "10.9.9.9" {
		t.Errorf("db.example.com in the table after it was added = %v, want 10.9.9.9", db)
	}
	if a := got["api.example.com"]; a == nil || a.GetIps()[0] != api.GetIps()[0] {
		t.Errorf("api.example.com moved from %v to %v when an unrelated host was added", api.GetIps(), a.GetIps())
	}
	agent.ACK(next)
	agent.Quiet(quietFor, "nothing else is sent to a name-table stream")
}

// TestNameTableStreamsAreCountedApart: with a mesh limited to one proxy,
// a pod's Envoy stream and its agent's name-table stream (same node) are
// both served; a second name-table stream is refused; the hub's config
// view finds the Envoy's stream by node ID.
func TestNameTableStreamsAreCountedApart(t *testing.T) {
	f := newFixture(t, nil, func(o *ads.Options) {
		o.MaxProxies = func(string) int { return 1 }
		o.LimitMetrics = meshlimits.NewMetrics(o.Registerer)
	})
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN")+"---"+ndsEntryYAML)))
	const id = "sidecar~10.0.0.5~app-1.demo~demo.svc.cluster.local"
	envoy := f.connect(t, captureNode(id))
	envoy.Subscribe(typeurl.Cluster)
	envoy.Next(typeurl.Cluster)
	agent := f.connect(t, captureNode(id))
	agent.Subscribe(typeurl.NameTable)
	agent.Next(typeurl.NameTable)
	if got := f.metric(t, "nave_mesh_limit_usage"); got != 1 {
		t.Errorf("nave_mesh_limit_usage = %v, want 1 (the Envoy only)", got)
	}
	pc, err := f.ads.ProxyConfig(id, nil)
	if err != nil || pc.ID != f.connStatusOf(t, id, false).ID {
		t.Errorf("the config view of node %s: %v; want the Envoy's stream", id, err)
	}

	second := f.connect(t, captureNode("sidecar~10.0.0.6~app-2.demo~demo.svc.cluster.local"))
	second.Subscribe(typeurl.NameTable)
	if err := second.Ended(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "name-table streams") {
		t.Errorf("a second name-table stream ended with %v; want ResourceExhausted naming name-table streams", err)
	}
	agent.Quiet(quietFor, "the refusal changes nothing for the first agent")
}

// TestNameTableOverDelta: a delta stream asking for the name table gets
// the one resource.
func TestNameTableOverDelta(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, ndsEntryYAML)))
	agent := f.connectDelta(t, captureNode("sidecar~10.0.0.5~app-1.demo~demo.svc.cluster.local"))
	agent.subscribe(typeurl.NameTable)
	r := agent.next(typeurl.NameTable)
	if len(r.GetResources()) != 1 {
		t.Fatalf("%d resources, want the name table", len(r.GetResources()))
	}
	var nt ndsv1.NameTable
	if err := r.GetResources()[0].GetResource().UnmarshalTo(&nt); err != nil || nt.GetTable()["api.example.com"] == nil {
		t.Errorf("delta name table %v (%v), want api.example.com", nt.GetTable(), err)
	}
}

// connStatusOf returns the status of node id's one stream that is (or is
// not) a name-table stream.
func (f *fixture) connStatusOf(t *testing.T, id string, nameTable bool) ads.ConnStatus {
	t.Helper()
	for _, cs := range f.ads.Status() {
		if cs.NodeID == id && cs.NameTable == nameTable {
			return cs
		}
	}
	t.Fatalf("no stream of node %s with nameTable %v", id, nameTable)
	return ads.ConnStatus{}
}
