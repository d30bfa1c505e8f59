package ingest_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/protocol"
	"github.com/navemesh/nave/shared/meshconfig"
)

func TestFullStateIsAckedAndStored(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	s := f.dial(t, "m", "c1")

	s.sendState(objs)
	st, ok := f.status("m", "c1")
	if !ok || !st.Connected || st.Synced {
		t.Fatalf("before the synced marker: status %+v (found %v), want connected and not synced", st, ok)
	}
	s.synced()

	st, _ = f.status("m", "c1")
	wantKinds := map[string]int{"VirtualService": 2, "DestinationRule": 1, "ServiceEntry": 1, "WorkloadEntry": 1}
	if !st.Connected || !st.Synced || st.Stale || !maps.Equal(st.Resources, wantKinds) ||
		st.Acks != 5 || st.Nacks != 0 || len(st.Rejected) != 0 || st.Peer == "" || st.DisconnectedAt != nil {
		t.Errorf("status = %+v, want connected, synced, %v, 5 acks (4 types + synced), no nacks", st, wantKinds)
	}
	c, ok := f.cluster("m", "c1")
	if !ok || !c.Connected || !c.Synced || c.Stale {
		t.Fatalf("cluster input = %+v (found %v), want connected and synced", c, ok)
	}
	if got, want := versions(c.Objects), versions(objs); !maps.Equal(got, want) {
		t.Errorf("stored objects = %v, want %v", got, want)
	}
	if got := f.store.Meshes(); !slices.Equal(got, []string{"m"}) {
		t.Errorf("Meshes() = %v, want [m]", got)
	}
	if f.changes.Load() == 0 {
		t.Error("OnChange was never called")
	}
}

// badEcho is demo/echo with weights summing to 90: built by hand, since
// YAML decoding would refuse it.
func badEcho(t *testing.T) *meshconfig.Object {
	t.Helper()
	kind, _ := meshconfig.KindByTypeURL(vsType)
	dest := func(subset string, w int32) *networking.HTTPRouteDestination {
		return &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: "echo.demo.svc.cluster.local", Subset: subset}, Weight: w}
	}
	o := &meshconfig.Object{Kind: kind, Name: "echo", Namespace: "demo", Spec: &networking.VirtualService{
		Hosts: []string{"echo.demo.svc.cluster.local"},
		Http:  []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{dest("v1", 50), dest("v2", 40)}}},
	}}
	o.Version = o.ComputeVersion()
	if meshconfig.Validate(o) == nil {
		t.Fatal("the bad VirtualService passes validation")
	}
	return o
}

var vsType = "type.googleapis.com/istio.networking.v1alpha3.VirtualService"

const otherVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: other, namespace: demo}
spec:
  hosts: [other.demo.svc.cluster.local]
  http:
  - route:
    - destination: {host: echo.demo.svc.cluster.local}
`

const fixedEcho = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  http:
  - route:
    - {destination: {host: echo.demo.svc.cluster.local, subset: v1}, weight: 50}
    - {destination: {host: echo.demo.svc.cluster.local, subset: v2}, weight: 50}
`

func TestInvalidResourceIsRejectedAndLastGoodStays(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	s := f.dial(t, "m", "c1")
	s.sync(objs)
	good := f.objects("m", "c1")["VirtualService demo/echo"]
	other := decode(t, otherVS)[0]

	r := s.nacked(s.send(vsType, []*meshconfig.Object{badEcho(t), other}))
	if code := codes.Code(r.GetErrorDetail().GetCode()); code != codes.InvalidArgument {
		t.Errorf("NACK code = %v, want InvalidArgument", code)
	}
	if msg := r.GetErrorDetail().GetMessage(); !strings.Contains(msg, "demo/echo") || strings.Contains(msg, "demo/other") {
		t.Errorf("NACK message %q should name demo/echo and only it", msg)
	}
	rej := protocol.Rejections(r)
	if len(rej) != 1 || rej[0].GetName() != "demo/echo" || rej[0].GetTypeUrl() != vsType ||
		!strings.Contains(rej[0].GetReason(), "weights sum to 90") {
		t.Fatalf("rejections = %v, want one for %s demo/echo saying the weights sum to 90", rej, vsType)
	}

	held := f.objects("m", "c1")
	if held["VirtualService demo/echo"] != good {
		t.Errorf("demo/echo = %+v, want the last good version %s kept", held["VirtualService demo/echo"], good.Version)
	}
	if o := held["VirtualService demo/other"]; o == nil || o.Version != other.Version {
		t.Errorf("demo/other = %+v, want it applied next to the rejected resource", o)
	}
	st, _ := f.status("m", "c1")
	if st.Nacks != 1 || len(st.Rejected) != 1 || st.Rejected[0].Namespace != "demo" || st.Rejected[0].Name != "echo" || st.Rejected[0].Reason != rej[0].GetReason() {
		t.Errorf("status: nacks %d, rejected %+v; want 1 nack and demo/echo with its reason", st.Nacks, st.Rejected)
	}

	// A reconnect whose full state still holds the bad version: the last
	// good version survives the prune at the synced marker.
	s.close()
	s2 := f.dial(t, "m", "c1")
	vss := append(pick(t, objs, "VirtualService demo/echo-beta"), badEcho(t), other)
	s2.nacked(s2.send(vsType, vss))
	s2.sendState(pick(t, objs, "DestinationRule demo/echo", "ServiceEntry demo/echo", "WorkloadEntry demo/echo-v1"))
	s2.synced()
	held = f.objects("m", "c1")
	if held["VirtualService demo/echo"] != good || held["VirtualService demo/other"] == nil || len(held) != 6 {
		t.Errorf("after a resync with the bad version: objects %v, demo/echo %+v; want the last good demo/echo kept",
			refs(held), held["VirtualService demo/echo"])
	}
	if st, _ := f.status("m", "c1"); len(st.Rejected) != 1 {
		t.Errorf("rejected = %+v, want demo/echo still listed", st.Rejected)
	}

	// A fixed version replaces it and clears the rejection.
	fixed := decode(t, fixedEcho)[0]
	s2.acked(s2.send(vsType, []*meshconfig.Object{fixed}))
	if o := f.objects("m", "c1")["VirtualService demo/echo"]; o == nil || o.Version != fixed.Version {
		t.Errorf("demo/echo = %+v, want the fixed version %s", o, fixed.Version)
	}
	if st, _ := f.status("m", "c1"); len(st.Rejected) != 0 {
		t.Errorf("rejected = %+v, want none once fixed", st.Rejected)
	}
}

func TestMalformedMessagesAreNACKed(t *testing.T) {
	f := newFixture(t, time.Hour)
	echo := pick(t, decode(t, fullState), "VirtualService demo/echo")
	enc, err := protocol.Encode(echo[0])
	if err != nil {
		t.Fatal(err)
	}
	s := f.dial(t, "m", "c1")

	s.sendRaw(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: vsType, Resources: []*discoveryv3.Resource{enc}, SystemVersionInfo: protocol.Version})
	r := s.nacked("")
	if msg := r.GetErrorDetail().GetMessage(); !strings.Contains(msg, "nonce") {
		t.Errorf("NACK of a message without nonce says %q, want it to name the missing nonce", msg)
	}

	const unknown = "type.googleapis.com/example.v1.Unknown"
	r = s.nacked(s.sendMsg(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: unknown, Resources: []*discoveryv3.Resource{enc}}))
	if msg := r.GetErrorDetail().GetMessage(); !strings.Contains(msg, "unknown type URL") || !strings.Contains(msg, unknown) {
		t.Errorf("NACK of an unknown type says %q, want it to name the unknown type URL", msg)
	}

	// A VirtualService sent as a DestinationRule is refused by name.
	drType := "type.googleapis.com/istio.networking.v1alpha3.DestinationRule"
	r = s.nacked(s.sendMsg(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: drType, Resources: []*discoveryv3.Resource{enc}}))
	if rej := protocol.Rejections(r); len(rej) != 1 || rej[0].GetName() != "demo/echo" || !strings.Contains(rej[0].GetReason(), "spec is") {
		t.Errorf("rejections = %v, want demo/echo refused for its spec type", rej)
	}

	if held := f.objects("m", "c1"); len(held) != 0 {
		t.Errorf("objects %v were applied from refused messages", refs(held))
	}
	// The stream still works: what it sends is applied at its synced
	// marker, not before (a cluster that never synced contributes nothing).
	s.acked(s.send(vsType, echo))
	if held := f.objects("m", "c1"); len(held) != 0 {
		t.Errorf("objects = %v before the synced marker, want none", refs(held))
	}
	s.synced()
	if held := f.objects("m", "c1"); len(held) != 1 {
		t.Errorf("objects = %v, want demo/echo", refs(held))
	}
}

func TestStreamWithoutIdentityIsRefused(t *testing.T) {
	mesh, cluster, proto := protocol.MetadataMesh, protocol.MetadataCluster, protocol.MetadataProtocol
	cases := []struct {
		name string
		md   metadata.MD
		want codes.Code
	}{
		{"no metadata", metadata.MD{}, codes.Unauthenticated},
		{"no cluster", metadata.Pairs(mesh, "m"), codes.Unauthenticated},
		{"no mesh", metadata.Pairs(cluster, "c1"), codes.Unauthenticated},
		{"cluster not a DNS label", metadata.Pairs(mesh, "m", cluster, "Cluster_1"), codes.Unauthenticated},
		{"two clusters", metadata.Pairs(mesh, "m", cluster, "c1", cluster, "c2"), codes.Unauthenticated},
		{"other protocol", metadata.Pairs(mesh, "m", cluster, "c1", proto, "v2"), codes.FailedPrecondition},
	}
	f := newFixture(t, time.Hour)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := f.open(t, tc.md).ended()
			if status.Code(err) != tc.want {
				t.Errorf("stream ended with %v, want %v", err, tc.want)
			}
		})
	}
	if st := f.store.Status(); len(st) != 0 {
		t.Errorf("refused streams left clusters behind: %+v", st)
	}
}
