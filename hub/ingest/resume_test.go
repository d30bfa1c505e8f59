package ingest_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	"github.com/navemesh/nave/shared/meshconfig"
)

var (
	drType = "type.googleapis.com/istio.networking.v1alpha3.DestinationRule"
	weType = "type.googleapis.com/istio.networking.v1alpha3.WorkloadEntry"
)

// resume sends the Resume message without digests and reads the hub's
// hints and answer: what the hub holds, and whether resume is in effect.
func (s *spoke) resume() (protocol.Held, bool) {
	s.t.Helper()
	held, resumed, _ := s.resumeFrom(nil)
	return held, resumed
}

// resumeFrom sends the Resume message with the digests of mine (none if
// nil) and reads the hub's hints and answer; hinted counts the resources
// the hints named (a type held as digested names none).
func (s *spoke) resumeFrom(mine []*meshconfig.Object) (held protocol.Held, resumed bool, hinted int) {
	s.t.Helper()
	var m protocol.Held
	msg := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.ResumeTypeURL}
	if mine != nil {
		m = heldOf(mine)
		msg = protocol.ResumeMessage(m)
	}
	nonce := s.sendMsg(msg)
	held, resumed, err := protocol.ReadResume(func() (*discoveryv3.DeltaDiscoveryRequest, error) {
		r := s.reply()
		for n := range r.GetInitialResourceVersions() {
			if n != protocol.HeldAsDigested {
				hinted++
			}
		}
		return r, nil
	}, nonce, m)
	if err != nil {
		s.t.Fatalf("resume: %v", err)
	}
	return held, resumed, hinted
}

// heldOf is what the hub should hint for objs.
func heldOf(objs []*meshconfig.Object) protocol.Held {
	h := protocol.Held{}
	for _, o := range objs {
		if h[o.Kind.TypeURL] == nil {
			h[o.Kind.TypeURL] = map[string]string{}
		}
		h[o.Kind.TypeURL][o.Key()] = o.Version
	}
	return h
}

func equalHeld(a, b protocol.Held) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]string) bool { return maps.Equal(x, y) })
}

// disconnect closes s and waits until the hub marks the cluster stale.
func (f *fixture) disconnect(t *testing.T, s *spoke, meshName, cluster string) {
	t.Helper()
	s.close()
	testwait.Until(t, "the cluster is disconnected", func() bool {
		st, ok := f.status(meshName, cluster)
		return ok && !st.Connected
	})
}

func TestResumeWithUnchangedStateSendsNothing(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	s1 := f.dial(t, "m", "c1")
	s1.sync(objs)
	before := f.objects("m", "c1")
	f.disconnect(t, s1, "m", "c1")
	calls := f.changes.Load() + f.endpointChanges.Load()

	s2 := f.dial(t, "m", "c1")
	held, resumed, hinted := s2.resumeFrom(decode(t, fullState))
	if !resumed {
		t.Fatal("a hub holding the cluster's synced state refused to resume")
	}
	if want := heldOf(decode(t, fullState)); !equalHeld(held, want) {
		t.Fatalf("hint = %v, want the versions the spoke computes for the same content: %v", held, want)
	}
	// The spoke's digests match every type: the hint names no resource.
	if hinted != 0 {
		t.Errorf("the hint named %d resources, want none (every type's digest matches)", hinted)
	}
	// Nothing differs: the spoke sends only the marker.
	s2.synced()
	if n := f.changes.Load() + f.endpointChanges.Load() - calls; n != 1 {
		t.Errorf("change callbacks = %d for a resumed reconnect, want 1 (the cluster's state: connected again)", n)
	}
	after := f.objects("m", "c1")
	if !maps.Equal(after, before) {
		t.Errorf("objects changed across a resumed reconnect:\nbefore %v\n after %v", refs(before), refs(after))
	}
	st, _ := f.status("m", "c1")
	if !st.Connected || !st.Synced || !st.Resumed || st.Pending != 0 {
		t.Errorf("status = %+v, want connected, synced, resumed", st)
	}
	if got := f.metric(t, "nave_hub_ingest_resume_requests_total"); got != 1 {
		t.Errorf("resume requests = %v, want 1", got)
	}
	if got := f.metric(t, "nave_hub_ingest_resume_unchanged_resources_total"); got != float64(len(objs)) {
		t.Errorf("unchanged resources = %v, want %d", got, len(objs))
	}
}

func TestResumeAppliesOnlyTheDifferenceAtTheMarker(t *testing.T) {
	for _, digests := range []bool{false, true} {
		t.Run(map[bool]string{false: "names", true: "digests"}[digests], func(t *testing.T) { testResumeDifference(t, digests) })
	}
}

// testResumeDifference: with digests, the spoke's Resume carries its
// state's digests, and the hub names only the types that differ.
func testResumeDifference(t *testing.T, digests bool) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	s1 := f.dial(t, "m", "c1")
	s1.sync(objs)
	before := f.objects("m", "c1")
	f.disconnect(t, s1, "m", "c1")

	// While disconnected the spoke's state changed: echo-beta modified, a
	// new VirtualService added, the DestinationRule deleted.
	changed := decode(t, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-beta, namespace: demo}
spec:
  hosts: [echo-beta.demo.svc.cluster.local]
  http:
  - route:
    - destination: {host: echo.demo.svc.cluster.local, subset: v1}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: added, namespace: demo}
spec:
  hosts: [added.demo.svc.cluster.local]
  http:
  - route:
    - destination: {host: echo.demo.svc.cluster.local}
`)
	s2 := f.dial(t, "m", "c1")
	var mine []*meshconfig.Object
	if digests {
		// What the spoke holds now: the changes, the ServiceEntry and the
		// WorkloadEntry; its VirtualService echo is unchanged.
		mine = append(pick(t, objs, "VirtualService demo/echo", "ServiceEntry demo/echo", "WorkloadEntry demo/echo-v1"), changed...)
	}
	held, resumed, hinted := s2.resumeFrom(mine)
	if !resumed || held.Count() != len(objs) {
		t.Fatalf("resume = %v with %d held, want resumed with %d", resumed, held.Count(), len(objs))
	}
	if want := map[bool]int{false: len(objs), true: 3}[digests]; hinted != want {
		t.Errorf("the hint named %d resources, want %d (with digests: the VirtualServices and the DestinationRule)", hinted, want)
	}
	s2.acked(s2.send(vsType, changed))
	s2.acked(s2.send(drType, nil, "demo/echo"))
	if got := f.objects("m", "c1"); !maps.Equal(got, before) {
		t.Errorf("before the marker the hub serves %v, want what it held (nothing is served before the spoke finished)", refs(got))
	}
	if st, _ := f.status("m", "c1"); st.Pending != 3 {
		t.Errorf("pending = %d, want 3 staged changes", st.Pending)
	}
	s2.synced()

	got := f.objects("m", "c1")
	want := []string{"ServiceEntry demo/echo", "VirtualService demo/added", "VirtualService demo/echo", "VirtualService demo/echo-beta", "WorkloadEntry demo/echo-v1"}
	if !slices.Equal(refs(got), want) {
		t.Fatalf("after the marker the hub holds %v, want %v", refs(got), want)
	}
	for _, r := range []string{"ServiceEntry demo/echo", "VirtualService demo/echo", "WorkloadEntry demo/echo-v1"} {
		if got[r] != before[r] {
			t.Errorf("%s was replaced, though unchanged", r)
		}
	}
	if got["VirtualService demo/echo-beta"].Version == before["VirtualService demo/echo-beta"].Version {
		t.Error("the modification was not applied")
	}
	if got := f.metric(t, "nave_hub_ingest_resume_unchanged_resources_total"); got != 3 {
		t.Errorf("unchanged resources = %v, want 3", got)
	}
}

func TestResumeWithoutCompleteStateAsksForTheFullState(t *testing.T) {
	f := newFixture(t, 200*time.Millisecond)
	objs := decode(t, fullState)

	// A cluster the hub never heard of (a hub restart).
	s1 := f.dial(t, "m", "c1")
	if held, resumed := s1.resume(); resumed || held != nil {
		t.Fatalf("a hub holding nothing resumed with %v", held)
	}
	// The full state then prunes as without resume.
	s1.sendState(pick(t, objs, "VirtualService demo/echo"))
	s1.synced()
	if got := refs(f.objects("m", "c1")); !slices.Equal(got, []string{"VirtualService demo/echo"}) {
		t.Fatalf("hub holds %v", got)
	}

	// A stream that never reached its marker leaves a never-synced
	// cluster without a complete state: still no resume.
	s2 := f.dial(t, "m", "c2")
	s2.sendState(objs)
	f.disconnect(t, s2, "m", "c2")
	s3 := f.dial(t, "m", "c2")
	if _, resumed := s3.resume(); resumed {
		t.Error("resumed a cluster that never synced")
	}
	s3.close()

	// A withdrawn cluster (grace period over) holds nothing.
	f.disconnect(t, s1, "m", "c1")
	testwait.Until(t, "c1 is withdrawn", func() bool {
		st, ok := f.status("m", "c1")
		return ok && st.Withdrawn != nil
	})
	s4 := f.dial(t, "m", "c1")
	if _, resumed := s4.resume(); resumed {
		t.Error("resumed a withdrawn cluster")
	}
	if got := f.metric(t, "nave_hub_ingest_resume_requests_total"); got != 3 {
		t.Errorf("resume requests = %v, want 3", got)
	}
}

func TestResumeMustBeTheFirstMessage(t *testing.T) {
	f := newFixture(t, time.Hour)
	s := f.dial(t, "m", "c1")
	s.sync(decode(t, fullState))
	r := s.nacked(s.send(protocol.ResumeTypeURL, nil))
	if !strings.Contains(r.GetErrorDetail().GetMessage(), "first message") {
		t.Errorf("NACK reason %q does not say why", r.GetErrorDetail().GetMessage())
	}
	if st, _ := f.status("m", "c1"); st.Resumed {
		t.Error("a late Resume marked the stream resumed")
	}
}

// TestOldStyleStreamAfterResumePrunes: a spoke that does not ask to resume
// gets today's rule, even right after a resumed stream: what it did not
// send is pruned at its marker.
func TestOldStyleStreamAfterResumePrunes(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	s1 := f.dial(t, "m", "c1")
	s1.sync(objs)
	f.disconnect(t, s1, "m", "c1")
	s2 := f.dial(t, "m", "c1")
	if _, resumed := s2.resume(); !resumed {
		t.Fatal("not resumed")
	}
	s2.synced()
	f.disconnect(t, s2, "m", "c1")

	s3 := f.dial(t, "m", "c1")
	s3.sync(pick(t, objs, "VirtualService demo/echo", "WorkloadEntry demo/echo-v1"))
	if got := refs(f.objects("m", "c1")); !slices.Equal(got, []string{"VirtualService demo/echo", "WorkloadEntry demo/echo-v1"}) {
		t.Errorf("after an old-style full state the hub holds %v, want only what it sent", got)
	}
	if st, _ := f.status("m", "c1"); st.Resumed {
		t.Error("an old-style stream is shown resumed")
	}
}

// TestResumeHintOvertakenByANewerStream: a stream resumed, then a newer
// stream of the cluster (a spoke moved again, or a relay of a later epoch)
// supersedes it before its marker. The older stream's removal and marker
// change nothing; the newer stream's hint still holds every resource, so
// nothing is lost, and a removal the older stream staged is not
// resurrected or applied behind the newer one's back.
func TestResumeHintOvertakenByANewerStream(t *testing.T) {
	f := newFixture(t, time.Hour)
	objs := decode(t, fullState)
	s1 := f.dial(t, "m", "c1")
	s1.sync(objs)
	before := f.objects("m", "c1")
	f.disconnect(t, s1, "m", "c1")

	s2 := f.dial(t, "m", "c1")
	if _, resumed := s2.resume(); !resumed {
		t.Fatal("not resumed")
	}
	s2.acked(s2.send(drType, nil, "demo/echo")) // staged

	s3 := f.dial(t, "m", "c1")
	if err := s2.ended(); status.Code(err) != codes.Aborted {
		t.Fatalf("older stream ended with %v, want Aborted", err)
	}
	held, resumed := s3.resume()
	if !resumed || !equalHeld(held, heldOf(objs)) {
		t.Fatalf("newer stream's hint = %v (resumed %v), want everything held: %v", held, resumed, heldOf(objs))
	}
	if got := f.objects("m", "c1"); !maps.Equal(got, before) {
		t.Errorf("hub holds %v after the overtaken stream, want %v", refs(got), refs(before))
	}
	// The newer stream's spoke no longer has the WorkloadEntry.
	s3.acked(s3.send(weType, nil, "demo/echo-v1"))
	s3.synced()
	want := []string{"DestinationRule demo/echo", "ServiceEntry demo/echo", "VirtualService demo/echo", "VirtualService demo/echo-beta"}
	if got := refs(f.objects("m", "c1")); !slices.Equal(got, want) {
		t.Errorf("hub holds %v, want %v: exactly the newer stream's removal", got, want)
	}
}
