package ingest_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	"github.com/navemesh/nave/shared/meshconfig"
)

func TestNewStreamSupersedesAndPrunesOnlyAfterSynced(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	s1 := f.dial(t, "m", "c1")
	s1.sync(objs)
	before := f.objects("m", "c1")

	// The second stream sends only one of the VirtualServices.
	s2 := f.dial(t, "m", "c1")
	s2.acked(s2.send(vsType, pick(t, objs, "VirtualService demo/echo")))
	err := s1.ended()
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "superseded") {
		t.Errorf("first stream ended with %v, want Aborted (superseded)", err)
	}
	st, _ := f.status("m", "c1")
	if !st.Connected || st.Synced {
		t.Errorf("before the new stream's synced marker: status %+v, want connected and not synced", st)
	}
	if got := f.objects("m", "c1"); !maps.Equal(got, before) {
		t.Errorf("before the synced marker the hub holds %v, want everything it held: %v", refs(got), refs(before))
	}

	s2.synced()
	got := f.objects("m", "c1")
	if !slices.Equal(refs(got), []string{"VirtualService demo/echo"}) {
		t.Errorf("after the synced marker the hub holds %v, want only what the new stream sent", refs(got))
	}
	if got["VirtualService demo/echo"] != before["VirtualService demo/echo"] {
		t.Error("an unchanged resource was replaced by the new stream")
	}
}

func TestReconnectWithUnchangedStateChangesNothing(t *testing.T) {
	f := newFixture(t, time.Hour)
	s1 := f.dial(t, "m", "c1")
	s1.sync(decode(t, fullState))
	before := f.objects("m", "c1")

	s1.close()
	testwait.Until(t, "the cluster is disconnected", func() bool {
		st, ok := f.status("m", "c1")
		return ok && !st.Connected
	})
	calls := f.changes.Load()

	// The same state again, decoded afresh as a restarted spoke would.
	s2 := f.dial(t, "m", "c1")
	s2.sendState(decode(t, fullState))
	if n := f.changes.Load() - calls; n != 0 {
		t.Errorf("resending unchanged resources called OnChange %d times, want 0", n)
	}
	s2.synced()
	if n := f.changes.Load() - calls; n != 1 {
		t.Errorf("OnChange called %d times for the reconnect, want once (the cluster's state changed)", n)
	}
	after := f.objects("m", "c1")
	if !maps.Equal(after, before) {
		t.Errorf("objects changed identity across an unchanged reconnect:\nbefore %v\n after %v", before, after)
	}
	if st, _ := f.status("m", "c1"); !st.Connected || !st.Synced || st.Stale {
		t.Errorf("status = %+v, want connected and synced", st)
	}
}

func TestRemovedResources(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	s := f.dial(t, "m", "c1")
	s.sync(objs)

	calls := f.changes.Load()
	s.acked(s.send(vsType, nil, "demo/echo"))
	got := f.objects("m", "c1")
	if got["VirtualService demo/echo"] != nil || got["VirtualService demo/echo-beta"] == nil || len(got) != len(objs)-1 {
		t.Errorf("after removing demo/echo the hub holds %v", refs(got))
	}
	if f.changes.Load() == calls {
		t.Error("a removal did not call OnChange")
	}

	// Removing what is not there changes nothing.
	calls = f.changes.Load()
	s.acked(s.send(vsType, nil, "demo/never-sent"))
	if f.changes.Load() != calls {
		t.Error("removing an unknown resource called OnChange")
	}

	// An upsert and a removal in one message; a removal of one type leaves
	// a same-named resource of another type alone.
	other := decode(t, otherVS)
	s.acked(s.send(vsType, other, "demo/echo-beta"))
	got = f.objects("m", "c1")
	want := []string{"DestinationRule demo/echo", "ServiceEntry demo/echo", "VirtualService demo/other", "WorkloadEntry demo/echo-v1"}
	if !slices.Equal(refs(got), want) {
		t.Errorf("hub holds %v, want %v", refs(got), want)
	}
	if st, _ := f.status("m", "c1"); st.Resources["VirtualService"] != 1 {
		t.Errorf("status resources = %v, want 1 VirtualService", st.Resources)
	}

	// A removal survives a reconnect: the resource is not resent, so it
	// stays gone.
	s.close()
	s2 := f.dial(t, "m", "c1")
	s2.sync(pick(t, append(objs, other...), "DestinationRule demo/echo", "ServiceEntry demo/echo",
		"VirtualService demo/other", "WorkloadEntry demo/echo-v1"))
	if got := refs(f.objects("m", "c1")); !slices.Equal(got, want) {
		t.Errorf("after a reconnect the hub holds %v, want %v", got, want)
	}
}

func TestClustersAreSeparatedByMesh(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	a := f.dial(t, "m1", "c1")
	a.sync(pick(t, objs, "VirtualService demo/echo", "ServiceEntry demo/echo"))
	b := f.dial(t, "m1", "c2")
	b.sync(pick(t, objs, "WorkloadEntry demo/echo-v1"))
	// Same cluster name in another mesh: a different store.
	c := f.dial(t, "m2", "c1")
	c.sync(pick(t, objs, "DestinationRule demo/echo"))

	names := func(meshName string) []string {
		var out []string
		for _, in := range f.store.Clusters(meshName) {
			out = append(out, in.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := names("m1"); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Errorf("Clusters(m1) = %v, want [c1 c2]", got)
	}
	if got := names("m2"); !slices.Equal(got, []string{"c1"}) {
		t.Errorf("Clusters(m2) = %v, want [c1]", got)
	}
	if got := names("m3"); len(got) != 0 {
		t.Errorf("Clusters(m3) = %v, want none", got)
	}
	for _, tc := range []struct {
		mesh, cluster string
		want          []string
	}{
		{"m1", "c1", []string{"ServiceEntry demo/echo", "VirtualService demo/echo"}},
		{"m1", "c2", []string{"WorkloadEntry demo/echo-v1"}},
		{"m2", "c1", []string{"DestinationRule demo/echo"}},
	} {
		if got := refs(f.objects(tc.mesh, tc.cluster)); !slices.Equal(got, tc.want) {
			t.Errorf("%s/%s holds %v, want %v", tc.mesh, tc.cluster, got, tc.want)
		}
	}
	if got := f.store.Meshes(); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("Meshes() = %v, want [m1 m2]", got)
	}

	// A stream of one mesh never supersedes or prunes another mesh's
	// cluster of the same name.
	c.close()
	a.acked(a.send(vsType, nil, "demo/echo"))
	if got := refs(f.objects("m2", "c1")); !slices.Equal(got, []string{"DestinationRule demo/echo"}) {
		t.Errorf("m2/c1 holds %v after m1/c1 changed", got)
	}
}

// TestEndpointChangesAreReportedSeparately: a message that changed only
// WorkloadEntries calls OnEndpointChange (the push pipeline skips the
// config debounce for it); config kinds call OnChange.
func TestEndpointChangesAreReportedSeparately(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	s := f.dial(t, "m", "c1")
	s.sync(objs)

	var we []*meshconfig.Object
	for _, o := range objs {
		if o.Kind.Kind == "WorkloadEntry" {
			we = append(we, o)
		}
	}
	if len(we) == 0 {
		t.Fatal("the fixture has no WorkloadEntry")
	}
	moved := decode(t, strings.Replace(fullState, "address: 127.0.0.1", "address: 127.0.0.9", 1))
	var movedWE []*meshconfig.Object
	for _, o := range moved {
		if o.Kind.Kind == "WorkloadEntry" {
			movedWE = append(movedWE, o)
		}
	}
	calls, ep := f.changes.Load(), f.endpointChanges.Load()
	s.acked(s.send(we[0].Kind.TypeURL, movedWE))
	if f.endpointChanges.Load() != ep+1 || f.changes.Load() != calls {
		t.Errorf("a WorkloadEntry change: OnEndpointChange +%d, OnChange +%d; want +1, +0",
			f.endpointChanges.Load()-ep, f.changes.Load()-calls)
	}
	calls, ep = f.changes.Load(), f.endpointChanges.Load()
	s.acked(s.send(vsType, nil, "demo/echo"))
	if f.endpointChanges.Load() != ep || f.changes.Load() != calls+1 {
		t.Errorf("a VirtualService change: OnEndpointChange +%d, OnChange +%d; want +0, +1",
			f.endpointChanges.Load()-ep, f.changes.Load()-calls)
	}
}

// TestWithdrawDropsAClusterAtOnce: Withdraw (a revocation) closes that
// cluster's stream, and no other, with PermissionDenied naming the reason,
// and drops its resources without waiting for the grace period.
func TestWithdrawDropsAClusterAtOnce(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	c1 := f.dial(t, "m", "c1")
	c1.sync(objs)
	c2 := f.dial(t, "m", "c2")
	c2.sync(objs)
	other := f.dial(t, "other", "c1")
	other.sync(objs)
	calls := f.changes.Load()

	if !f.store.Withdraw(ingest.ClusterIdentity{Mesh: "m", Cluster: "c1"}, "cluster revoked") {
		t.Fatal("Withdraw of a connected cluster reported nothing")
	}
	if err := c1.ended(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "cluster revoked") {
		t.Errorf("withdrawn stream ended with %v, want PermissionDenied naming the reason", err)
	}
	// Gone now, not after the hour of grace; the other clusters stay.
	if _, ok := f.status("m", "c1"); ok {
		t.Error("a withdrawn cluster is still listed")
	}
	if _, found := f.cluster("m", "c1"); found {
		t.Error("a withdrawn cluster's resources are still merged")
	}
	if len(f.objects("m", "c2")) == 0 || len(f.objects("other", "c1")) == 0 {
		t.Error("another cluster lost its resources")
	}
	if f.changes.Load() == calls {
		t.Error("Withdraw did not notify a change")
	}
	if f.store.Withdraw(ingest.ClusterIdentity{Mesh: "m", Cluster: "c1"}, "again") {
		t.Error("Withdraw of a withdrawn cluster reported something")
	}
	if f.store.Withdraw(ingest.ClusterIdentity{Mesh: "m", Cluster: "never"}, "unknown") {
		t.Error("Withdraw of an unknown cluster reported something")
	}
	// The other streams, of the same mesh and of another mesh's
	// same-named cluster, still work.
	for _, s := range []*spoke{c2, other} {
		s.acked(s.send(vsType, pick(t, objs, "VirtualService demo/echo")))
	}
}

// TestWithdrawMeshDropsEveryClusterOfTheMesh: WithdrawMesh (a deleted
// mesh) closes the streams of every cluster of the mesh and drops their
// resources at once; another mesh's same-named cluster stays.
func TestWithdrawMeshDropsEveryClusterOfTheMesh(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	c1 := f.dial(t, "m", "c1")
	c1.sync(objs)
	c2 := f.dial(t, "m", "c2")
	c2.sync(objs)
	other := f.dial(t, "other", "c1")
	other.sync(objs)

	got := f.store.WithdrawMesh("m", "mesh m deleted")
	want := []ingest.ClusterIdentity{{Mesh: "m", Cluster: "c1"}, {Mesh: "m", Cluster: "c2"}}
	if !slices.Equal(got, want) {
		t.Errorf("WithdrawMesh = %v, want %v", got, want)
	}
	for _, s := range []*spoke{c1, c2} {
		if err := s.ended(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "mesh m deleted") {
			t.Errorf("stream of the deleted mesh ended with %v, want PermissionDenied naming the reason", err)
		}
	}
	for _, c := range []string{"c1", "c2"} {
		if _, ok := f.status("m", c); ok {
			t.Errorf("cluster %s of the deleted mesh is still listed", c)
		}
	}
	if len(f.objects("other", "c1")) == 0 {
		t.Error("the other mesh's cluster lost its resources")
	}
	other.acked(other.send(vsType, pick(t, objs, "VirtualService demo/echo")))
	if got := f.store.WithdrawMesh("m", "again"); len(got) != 0 {
		t.Errorf("WithdrawMesh again withdrew %v", got)
	}
}

// TestMoveAsksTheSpokeToReconnectAndKeepsItsState: Move closes the spoke's
// stream of the given epoch (and no other) with UNAVAILABLE and the
// reconnect and redirect trailers; the cluster's resources stay, and the
// spoke's next stream with the same state changes none of them.
func TestMoveAsksTheSpokeToReconnectAndKeepsItsState(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	id := ingest.ClusterIdentity{Mesh: "m", Cluster: "c1"}
	c1 := f.dial(t, "m", "c1")
	c1.sync(objs)
	before := versions(objs)
	hs := f.own.Holdings(ingest.HoldingFilter{Only: id})
	if len(hs) != 1 {
		t.Fatal("the cluster is not held")
	}
	h := hs[0]
	if f.own.Move(id, ingest.Epoch{At: h.Epoch.At - 1, Replica: h.Epoch.Replica}, "balancing", "10.0.0.2:15012") {
		t.Fatal("Move of another epoch closed the stream")
	}
	if !f.own.Move(id, h.Epoch, "balancing spokes", "10.0.0.2:15012") {
		t.Fatal("Move of the open stream reported none")
	}
	err := c1.ended()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "balancing spokes") {
		t.Errorf("moved stream ended with %v, want Unavailable naming the reason", err)
	}
	tr := c1.stream.Trailer()
	if got := tr.Get(protocol.TrailerReconnect); len(got) != 1 {
		t.Errorf("trailer %s = %v, want one value", protocol.TrailerReconnect, got)
	}
	if got := tr.Get(protocol.TrailerRedirect); len(got) != 1 || got[0] != "10.0.0.2:15012" {
		t.Errorf("trailer %s = %v, want [10.0.0.2:15012]", protocol.TrailerRedirect, got)
	}
	if f.own.Move(id, h.Epoch, "again", "") {
		t.Error("Move of a closed stream reported one")
	}
	held := func() map[string]string { return versions(slices.Collect(maps.Values(f.objects("m", "c1")))) }
	if got := held(); !maps.Equal(got, before) {
		t.Errorf("after the move the hub holds %v, want %v", got, before)
	}
	if st, _ := f.status("m", "c1"); st.Connected || !st.Stale {
		t.Errorf("after the move: %+v, want disconnected and stale", st)
	}
	again := f.dial(t, "m", "c1")
	again.sync(objs)
	if got := held(); !maps.Equal(got, before) {
		t.Errorf("after the reconnect the hub holds %v, want %v", got, before)
	}
	if st, _ := f.status("m", "c1"); !st.Connected || !st.Synced {
		t.Errorf("after the reconnect: %+v", st)
	}
}
