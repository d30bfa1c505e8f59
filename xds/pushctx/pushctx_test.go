package pushctx_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

const echoListener = "echo.demo.svc.cluster.local:7070"

// TestNotificationsWithinQuietPeriodMakeOneBuild: notifications closer
// together than the quiet period make one build, exactly quiet after the
// last of them (fake clock).
func TestNotificationsWithinQuietPeriodMakeOneBuild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const quiet = 300 * time.Millisecond
		src := pushctxtest.NewSource()
		src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
		m := start(t, src, quiet, time.Minute)
		_, ready := m.Current("m")

		// Spread over time, so that the debounce (not the one-slot pending
		// notification) is what merges them: every gap is well inside quiet.
		for i := range 15 {
			if i > 0 {
				time.Sleep(10 * time.Millisecond)
			}
			m.Notify("m")
		}
		if closedAfter(quiet-time.Millisecond, ready) {
			t.Fatal("published before the mesh was quiet for the quiet period")
		}
		if !closedAfter(time.Millisecond, ready) {
			t.Fatal("not published once the mesh was quiet for the quiet period")
		}
		st, _ := m.Current("m")
		if st.Version != 1 || src.Builds("m") != 1 {
			t.Fatalf("after 15 notifications: version %d, %d builds; want one build", st.Version, src.Builds("m"))
		}
		// Nothing is pending, so no second build follows.
		time.Sleep(time.Hour)
		synctest.Wait()
		if st, _ := m.Current("m"); st.Version != 1 || src.Builds("m") != 1 {
			t.Errorf("later: version %d, %d builds; want still one", st.Version, src.Builds("m"))
		}
	})
}

// TestContinuousNotificationsBuildByDebounceMax: a mesh that is never
// quiet is built every DebounceMax (fake clock).
func TestContinuousNotificationsBuildByDebounceMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := pushctxtest.NewSource()
		src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
		// The mesh is never quiet for an hour: every build comes from DebounceMax.
		m := start(t, src, time.Hour, 50*time.Millisecond)
		st, ready := m.Current("m")
		if st != nil {
			t.Fatal("a State before any notification")
		}

		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				m.Notify("m")
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
		defer func() { close(stop); <-done }()

		if closedAfter(50*time.Millisecond-time.Nanosecond, ready) {
			t.Fatal("built before DebounceMax under continuous change")
		}
		if !closedAfter(time.Nanosecond, ready) {
			t.Fatal("not built at DebounceMax under continuous change")
		}
		// Each later burst starts with the first notification after a
		// build, and is built DebounceMax after it.
		time.Sleep(110 * time.Millisecond)
		synctest.Wait()
		if st, _ := m.Current("m"); st.Version < 3 {
			t.Fatalf("version %d 160 ms into continuous change, want a build every 50 ms (3)", st.Version)
		}
	})
}

// closedAfter moves synctest's clock d forward, lets the bubble settle and
// reports whether ch is closed then.
func closedAfter(d time.Duration, ch <-chan struct{}) bool {
	time.Sleep(d)
	synctest.Wait()
	return pushctxtest.Closed(ch)
}

func TestNotificationBeforeStartIsKept(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	m := pushctx.New(src, pushctx.Options{DebounceQuiet: 10 * time.Millisecond, DebounceMax: 100 * time.Millisecond})
	m.Notify("m")
	_, ready := m.Current("m")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m.Start(ctx)
	pushctxtest.Await(t, ready, "the notification sent before Start is served")
}

func TestCurrentWaitsUntilAClusterHasSynced(t *testing.T) {
	src := pushctxtest.NewSource()
	objs := pushctxtest.EchoConfig(t, 80, 20)
	src.Set("m", pushctxtest.Cluster("c1", false, objs))
	m := start(t, src, 10*time.Millisecond, 100*time.Millisecond)
	c := cache.New(m, cache.Options{})

	st, ready := m.Current("m")
	if st != nil || pushctxtest.Closed(ready) {
		t.Fatal("a mesh without a synced cluster is ready")
	}
	// Two builds run one after the other: once the second has started, the
	// first has decided not to publish.
	m.Notify("m")
	pushctxtest.Eventually(t, "a build", func() bool { return src.Builds("m") >= 1 })
	m.Notify("m")
	pushctxtest.Eventually(t, "a second build", func() bool { return src.Builds("m") >= 2 })
	if st, ch := m.Current("m"); st != nil || pushctxtest.Closed(ready) || ch != ready {
		t.Fatalf("published %+v before any cluster synced", st)
	}

	src.Set("m", pushctxtest.Cluster("c1", true, objs), pushctxtest.Cluster("c2", false, nil))
	m.Notify("m")
	pushctxtest.Await(t, ready, "the first publication")
	st, superseded := m.Current("m")
	if st == nil || st.Version != 1 || st.Mesh != "m" || superseded != st.Superseded() || pushctxtest.Closed(superseded) {
		t.Fatalf("first State = %+v, want version 1 of mesh m, not superseded", st)
	}
	if c.Entry(st).Proxyless().Resources[typeurl.Listener][echoListener] == nil || st.Snapshot.Services["echo.demo.svc.cluster.local"] == nil {
		t.Errorf("first State lacks the echo service: resources %v", c.Entry(st).Proxyless())
	}
	if len(st.Snapshot.Clusters) != 2 {
		t.Errorf("snapshot clusters = %+v, want c1 and c2", st.Snapshot.Clusters)
	}

	// Once ready, a mesh stays ready while its clusters resync.
	src.Set("m", pushctxtest.Cluster("c1", false, objs))
	m.Notify("m")
	pushctxtest.Await(t, superseded, "the next publication")
	st2, _ := m.Current("m")
	if st2 == nil || st2.Version != 2 {
		t.Fatalf("after a resync began: State %+v, want version 2", st2)
	}
	if states := m.States(); len(states) != 1 || states[0] != st2 {
		t.Errorf("States() = %v, want only the current State", states)
	}
}

func TestPublicationSupersedesAndSharesUnchangedResources(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	m := start(t, src, 10*time.Millisecond, 100*time.Millisecond)
	c := cache.New(m, cache.Options{})
	_, ready := m.Current("m")
	m.Notify("m")
	pushctxtest.Await(t, ready, "the first publication")
	st1, _ := m.Current("m")
	for _, typeURL := range gen.Types {
		if len(c.Entry(st1).Proxyless().Resources[typeURL]) == 0 {
			t.Fatalf("no %s generated; the test needs every type", typeURL)
		}
	}

	// Only the route's weights change.
	src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 20, 80)))
	m.Notify("m")
	pushctxtest.Await(t, st1.Superseded(), "the first State is superseded")
	st2, _ := m.Current("m")
	if st2.Version != st1.Version+1 || pushctxtest.Closed(st2.Superseded()) {
		t.Fatalf("second State: version %d (superseded %v), want %d and current", st2.Version, pushctxtest.Closed(st2.Superseded()), st1.Version+1)
	}
	for _, typeURL := range gen.Types {
		if len(c.Entry(st2).Proxyless().Resources[typeURL]) != len(c.Entry(st1).Proxyless().Resources[typeURL]) {
			t.Errorf("%s: %d resources, before %d", typeURL, len(c.Entry(st2).Proxyless().Resources[typeURL]), len(c.Entry(st1).Proxyless().Resources[typeURL]))
		}
		for name, p1 := range c.Entry(st1).Proxyless().Resources[typeURL] {
			p2 := c.Entry(st2).Proxyless().Resources[typeURL][name]
			changed := typeURL == typeurl.Route && name == echoListener
			switch {
			case p2 == nil:
				t.Errorf("%s %s vanished", typeURL, name)
			case changed && (p2 == p1 || p2.Hash == p1.Hash):
				t.Errorf("%s %s did not change with the weights", typeURL, name)
			case !changed && p2 != p1:
				t.Errorf("unchanged %s %s is a new Prepared (hash %s, was %s)", typeURL, name, p2.Hash, p1.Hash)
			}
		}
	}

	// A rebuild without change publishes the very same resources.
	m.Notify("m")
	pushctxtest.Await(t, st2.Superseded(), "the second State is superseded")
	st3, _ := m.Current("m")
	for _, typeURL := range gen.Types {
		for name, p2 := range c.Entry(st2).Proxyless().Resources[typeURL] {
			if c.Entry(st3).Proxyless().Resources[typeURL][name] != p2 {
				t.Errorf("unchanged %s %s is a new Prepared", typeURL, name)
			}
		}
	}
}

func TestMeshesAreBuiltSeparately(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("m1", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	src.Set("m2", pushctxtest.Cluster("c1", false, pushctxtest.EchoConfig(t, 20, 80)), pushctxtest.Cluster("c2", false, nil))
	m := start(t, src, 10*time.Millisecond, 100*time.Millisecond)
	_, ready1 := m.Current("m1")
	_, ready2 := m.Current("m2")
	m.Notify("m1")
	m.Notify("m2")
	pushctxtest.Await(t, ready1, "m1 is published")
	pushctxtest.Eventually(t, "m2 was built", func() bool { return src.Builds("m2") >= 1 })
	m.Notify("m2")
	pushctxtest.Eventually(t, "m2 was built again", func() bool { return src.Builds("m2") >= 2 })
	if pushctxtest.Closed(ready2) {
		t.Error("m2 published although none of its clusters synced")
	}
	st, _ := m.Current("m1")
	if len(st.Snapshot.Clusters) != 1 || st.Snapshot.Clusters[0].Name != "c1" || st.Snapshot.Mesh != "m1" {
		t.Errorf("m1's snapshot holds clusters %+v", st.Snapshot.Clusters)
	}
	if states := m.States(); len(states) != 1 || states[0].Mesh != "m1" {
		t.Errorf("States() = %v, want only m1", states)
	}
}

// A service without a DestinationRule is ordinary config. The generator
// runs in the Manager's goroutine, where a panic would end the hub; it is
// first called here, where a panic fails only this test.
func TestServiceWithoutDestinationRuleIsPublished(t *testing.T) {
	objs := pushctxtest.EchoConfig(t, 100, 0)
	var noDR []*meshconfig.Object
	for _, o := range objs {
		if o.Kind.Kind != "DestinationRule" && o.Kind.Kind != "VirtualService" {
			noDR = append(noDR, o)
		}
	}
	in := []mesh.ClusterInput{pushctxtest.Cluster("c1", true, noDR)}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("generating a service without a DestinationRule panics: %v", r)
			}
		}()
		gen.GRPC(mesh.Build("m", in))
	}()

	src := pushctxtest.NewSource()
	src.Set("m", in...)
	m := start(t, src, 10*time.Millisecond, 100*time.Millisecond)
	c := cache.New(m, cache.Options{})
	_, ready := m.Current("m")
	m.Notify("m")
	pushctxtest.Await(t, ready, "the first publication")
	st, _ := m.Current("m")
	if c.Entry(st).Proxyless().Resources[typeurl.Cluster]["outbound|7070||echo.demo.svc.cluster.local"] == nil {
		t.Errorf("clusters = %v, want the echo service's", c.Entry(st).Proxyless().Resources[typeurl.Cluster])
	}
}

// TestEndpointNotificationSkipsDebounce: an endpoint-only change is built
// at once, while a config change waits out the quiet period.
func TestEndpointNotificationSkipsDebounce(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	synctest.Test(t, func(t *testing.T) {
		m := start(t, src, time.Hour, time.Hour)
		_, ready := m.Current("m")
		m.NotifyEndpoints("m")
		synctest.Wait()
		if !pushctxtest.Closed(ready) {
			t.Fatal("an endpoint notification did not publish at once")
		}

		st, changed := m.Current("m")
		m.Notify("m")
		m.NotifyEndpoints("m") // taken along by the pending build: no build of its own
		if closedAfter(time.Hour-time.Nanosecond, changed) {
			t.Fatal("a config notification was built before its debounce ended")
		}
		if now, _ := m.Current("m"); now != st {
			t.Fatal("a new State appeared during the debounce")
		}
		if !closedAfter(time.Nanosecond, changed) {
			t.Fatal("a config notification was not built when its debounce ended")
		}
	})
}

// TestEndpointNotificationWithNothingNewPublishesNothing: an endpoint
// notification whose change the last build already took along publishes
// no new State (no stream wakes for nothing); one that brings a change is
// published at once, and a config notification is published even without
// one.
func TestEndpointNotificationWithNothingNewPublishesNothing(t *testing.T) {
	src := pushctxtest.NewSource()
	objs := pushctxtest.EchoConfig(t, 80, 20)
	src.Set("m", pushctxtest.Cluster("c1", true, objs))
	synctest.Test(t, func(t *testing.T) {
		m := start(t, src, time.Hour, time.Hour)
		_, ready := m.Current("m")
		m.NotifyEndpoints("m")
		synctest.Wait()
		if !pushctxtest.Closed(ready) {
			t.Fatal("the first endpoint notification did not publish at once")
		}
		st, changed := m.Current("m")
		builds := src.Builds("m")

		m.NotifyEndpoints("m") // nothing new since the build
		synctest.Wait()
		if src.Builds("m") != builds+1 {
			t.Fatalf("%d builds after an endpoint notification, want %d", src.Builds("m"), builds+1)
		}
		if pushctxtest.Closed(changed) {
			now, _ := m.Current("m")
			t.Fatalf("an endpoint notification with nothing new published version %d over %d", now.Version, st.Version)
		}

		// An endpoint that moves is published at once.
		objs = slices.Clone(objs)
		for i, o := range objs {
			if o.Kind.Kind == "WorkloadEntry" {
				moved, errs := meshconfig.DecodeYAML([]byte(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: `+o.Name+`, namespace: `+o.Namespace+`}
spec: {address: 10.200.0.1, ports: {grpc: 17070}, labels: {app: echo, version: v1}}
`), "moved.yaml")
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				objs[i] = moved[0]
				break
			}
		}
		src.Set("m", pushctxtest.Cluster("c1", true, objs))
		m.NotifyEndpoints("m")
		synctest.Wait()
		if !pushctxtest.Closed(changed) {
			t.Fatal("an endpoint notification with a moved endpoint was not published at once")
		}
		st2, changed2 := m.Current("m")
		if st2.Version != st.Version+1 || len(st2.Diff.Hosts) == 0 || st2.Diff.Config {
			t.Fatalf("version %d, diff %+v: want the next version with an endpoint change", st2.Version, st2.Diff)
		}

		// A config notification is published even with nothing new.
		m.Notify("m")
		if !closedAfter(time.Hour, changed2) {
			t.Fatal("a config notification with nothing new was not published when its debounce ended")
		}
	})
}

// TestAdaptiveDefersBuildsNobodyWatches: with Adaptive, a published mesh
// that no stream watches is not rebuilt; a watcher arriving gets the
// deferred changes built at once.
func TestAdaptiveDefersBuildsNobodyWatches(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	synctest.Test(t, func(t *testing.T) {
		m := pushctx.New(src, pushctx.Options{DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond, Adaptive: true})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		m.Start(ctx)
		_, ready := m.Current("m")
		m.Notify("m")
		pushctxtest.Await(t, ready, "the first publication happens without watchers")

		st, changed := m.Current("m")
		src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 20, 80)))
		m.Notify("m")
		if closedAfter(time.Hour, changed) { // every debounce of the change has ended
			t.Fatal("a mesh nobody watches was rebuilt")
		}
		unwatch := m.Watch("m")
		defer unwatch()
		pushctxtest.Await(t, changed, "the deferred build when a stream watches")
		if now, _ := m.Current("m"); now == st || now.Diff.Unchanged() {
			t.Error("the new State does not carry the deferred change")
		}
		// While watched, changes are built as usual.
		_, changed = m.Current("m")
		src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 50, 50)))
		m.Notify("m")
		pushctxtest.Await(t, changed, "a build while watched")
	})
}

// TestLeadingEdgeBuildsTheFirstChangeAtOnce: on the leading edge, the
// first config change after a quiet period is built at once; changes
// right after it are held and built together, quiet after the last of
// them (fake clock).
func TestLeadingEdgeBuildsTheFirstChangeAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const quiet = 100 * time.Millisecond
		src := pushctxtest.NewSource()
		src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
		m := pushctx.New(src, pushctx.Options{DebounceQuiet: quiet, DebounceMax: time.Second, DebounceEdge: debounce.Leading})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		m.Start(ctx)
		_, ready := m.Current("m")
		m.Notify("m")
		synctest.Wait()
		if !pushctxtest.Closed(ready) {
			t.Fatal("the first change after a quiet period was not built at once")
		}

		st, changed := m.Current("m")
		for range 3 {
			time.Sleep(10 * time.Millisecond)
			m.Notify("m")
		}
		if closedAfter(quiet-time.Nanosecond, changed) {
			t.Fatal("changes right after a build were built before their quiet period")
		}
		if now, _ := m.Current("m"); now != st {
			t.Fatal("a new State appeared during the quiet period")
		}
		if !closedAfter(time.Nanosecond, changed) {
			t.Fatal("the held changes were not built quiet after the last of them")
		}
		if st, _ := m.Current("m"); st.Version != 2 || src.Builds("m") != 2 {
			t.Fatalf("version %d, %d builds; want the first change and the held ones: 2", st.Version, src.Builds("m"))
		}

		// A quiet period later, a change is built at once again.
		time.Sleep(time.Second)
		_, changed = m.Current("m")
		m.Notify("m")
		synctest.Wait()
		if !pushctxtest.Closed(changed) {
			t.Fatal("a change after a quiet period was not built at once")
		}
	})
}

// Each mesh's snapshot carries the trust domain Options.TrustDomain gives it (its CA's), read
// at every build; a mesh it names none for has the default. (A hub once left every mesh at
// cluster.local: proxyless clients of a mesh with another trust domain refused their
// servers' certificates: e2e/node AppMTLS.)
func TestSnapshotsCarryTheMeshTrustDomain(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("acme", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	src.Set("other", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	domains := map[string]string{"acme": "acme.example.com"}
	m := pushctx.New(src, pushctx.Options{DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond,
		TrustDomain: func(mesh string) string { return domains[mesh] }})
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	m.Start(ctx)
	for name, want := range map[string]string{"acme": "acme.example.com", "other": mesh.DefaultTrustDomain} {
		_, ready := m.Current(name)
		m.Notify(name)
		pushctxtest.Await(t, ready, name+" is published")
		if st, _ := m.Current(name); st.Snapshot.TrustDomain != want {
			t.Errorf("mesh %s: snapshot trust domain %q, want %q", name, st.Snapshot.TrustDomain, want)
		}
	}
}
