package tenants_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/tenants"
)

// wait bounds every wait for an event in these tests.
const wait = 30 * time.Second

func spec(name, td string, extra ...string) []byte {
	doc := fmt.Sprintf("apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: %s}\nspec:\n  trustDomain: %s\n", name, td)
	for _, e := range extra {
		doc += "  " + e + "\n"
	}
	return []byte(doc)
}

// events records a Registry's changes.
type events struct{ ch chan event }

type event struct {
	name     string
	old, cur *tenants.Mesh
}

func watch(r *tenants.Registry) *events {
	e := &events{ch: make(chan event, 100)}
	r.Subscribe(func(name string, old, cur *tenants.Mesh) { e.ch <- event{name, old, cur} })
	return e
}

// next awaits the next change of mesh name that match says is the one.
func (e *events) next(t *testing.T, name string, match func(old, cur *tenants.Mesh) bool) event {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case ev := <-e.ch:
			if ev.name == name && match(ev.old, ev.cur) {
				return ev
			}
		case <-deadline:
			t.Fatalf("mesh %s: the change awaited did not come within %s", name, wait)
		}
	}
}

// purges records a Purger's calls.
type purges chan string

func (p purges) Purge(_ context.Context, mesh string, keepCA bool) error {
	p <- fmt.Sprintf("%s keepCA=%v", mesh, keepCA)
	return nil
}

func newService(t *testing.T, store *tenants.Store, opts tenants.Options) *tenants.Service {
	t.Helper()
	s, err := tenants.New(t.Context(), store, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run runs s until the test ends.
func run(t *testing.T, s *tenants.Service, p tenants.Purger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx, p) }()
	t.Cleanup(func() { cancel(); <-done })
}

// testStoreContract runs what every kind of store must do. fresh empties
// the store and returns a func opening it (another replica each call).
func testStoreContract(t *testing.T, fresh func(t *testing.T) func() *tenants.Store) {
	t.Run("MeshNetworks", func(t *testing.T) {
		open := fresh(t)
		s := newService(t, open(), tenants.Options{})
		ev := watch(s.Registry())
		ctx := t.Context()
		nets := "meshNetworks: {networks: {net1: {endpoints: [{fromRegistry: east}], gateways: [{address: 192.0.2.1, port: 15443}]}}}"
		m, err := s.Create(ctx, spec("acme", "acme.example", nets))
		if err != nil {
			t.Fatal(err)
		}
		if gw := m.Networks.GetNetworks()["net1"].GetGateways(); len(gw) != 1 || gw[0].GetAddress() != "192.0.2.1" {
			t.Errorf("created mesh has networks %v", m.Networks)
		}
		nets2 := "meshNetworks: {networks: {net2: {gateways: [{registryServiceName: ew.nave-system.svc.cluster.local, port: 15443}]}}}"
		if _, err := s.Update(ctx, "acme", spec("acme", "acme.example", nets2)); err != nil {
			t.Fatal(err)
		}
		e := ev.next(t, "acme", func(old, cur *tenants.Mesh) bool { return cur != nil && cur.Generation == 2 })
		if n := e.cur.Networks.GetNetworks(); len(n) != 1 || n["net2"].GetGateways()[0].GetPort() != 15443 {
			t.Errorf("updated mesh has networks %v", e.cur.Networks)
		}
		var fe *tenants.FieldError
		bad := "meshNetworks: {networks: {net2: {gateways: [{address: 192.0.2.1, port: 0}]}}}"
		if _, err := s.Update(ctx, "acme", spec("acme", "acme.example", bad)); !errors.As(err, &fe) ||
			fe.Field != "spec.meshNetworks.networks[net2].gateways[0].port" {
			t.Errorf("update with a bad gateway port: %v", err)
		}
		// Another replica reads the same networks from the store.
		other := newService(t, open(), tenants.Options{})
		if got, ok := other.Registry().Get("acme"); !ok || got.Networks.GetNetworks()["net2"] == nil {
			t.Errorf("another replica reads networks %v", got)
		}
	})
	t.Run("Lifecycle", func(t *testing.T) {
		open := fresh(t)
		s := newService(t, open(), tenants.Options{})
		ev := watch(s.Registry())
		ctx := t.Context()

		m, err := s.Create(ctx, spec("acme", "acme.example", "limits: {proxies: 7}"))
		if err != nil {
			t.Fatal(err)
		}
		if m.Generation != 1 || m.Phase != tenants.Active || m.UID == "" || m.Limits.Proxies != 7 ||
			m.Limits.Spokes != tenants.DefaultLimits.Spokes || m.Config.GetTrustDomain() != "acme.example" {
			t.Errorf("created %+v", m)
		}
		if !s.Registry().Hosted("acme") {
			t.Error("a created mesh is not hosted by the replica that created it")
		}
		if _, err := s.Create(ctx, spec("acme", "other.example")); !errors.Is(err, tenants.ErrExists) {
			t.Errorf("create of an existing name: %v, want ErrExists", err)
		}
		var fe *tenants.FieldError
		if _, err := s.Create(ctx, spec("beta", "acme.example")); !errors.As(err, &fe) || fe.Field != "spec.trustDomain" {
			t.Errorf("create with a taken trust domain: %v, want a refusal of spec.trustDomain", err)
		}
		if _, err := s.Create(ctx, spec("beta", "beta.example", "meshConfig: {trustDomainAliases: [acme.example]}")); !errors.As(err, &fe) ||
			fe.Field != "spec.meshConfig.trustDomainAliases[0]" {
			t.Errorf("create with another mesh's trust domain as alias: %v", err)
		}

		up, err := s.Update(ctx, "acme", spec("acme", "acme.example", "meshConfig: {rootNamespace: acme-root}"))
		if err != nil {
			t.Fatal(err)
		}
		e := ev.next(t, "acme", func(old, cur *tenants.Mesh) bool { return old != nil && cur != nil && cur.Generation == 2 })
		if up.UID != m.UID || e.cur.Config.GetRootNamespace() != "acme-root" || e.cur.Limits.Proxies != tenants.DefaultLimits.Proxies {
			t.Errorf("updated %+v", e.cur)
		}
		if _, err := s.Update(ctx, "acme", spec("acme", "new.example")); !errors.As(err, &fe) || fe.Field != "spec.trustDomain" {
			t.Errorf("update changing the trust domain: %v", err)
		}
		if _, err := s.Update(ctx, "acme", spec("acme", "acme.example", "limits: {spokes: -2}")); !errors.As(err, &fe) || fe.Field != "spec.limits.spokes" {
			t.Errorf("update with a bad limit: %v", err)
		}
		if cur, _ := s.Registry().Get("acme"); cur.Generation != 2 || cur.Config.GetRootNamespace() != "acme-root" {
			t.Errorf("a refused update changed the mesh: %+v", cur)
		}
		if _, err := s.Update(ctx, "nope", spec("nope", "nope.example")); !errors.Is(err, tenants.ErrNotFound) {
			t.Errorf("update of a missing mesh: %v", err)
		}

		p := make(purges, 10)
		run(t, s, p)
		d, err := s.Delete(ctx, "acme", true)
		if err != nil {
			t.Fatal(err)
		}
		if d.Phase != tenants.Deleting || !d.KeepCA || s.Registry().Hosted("acme") {
			t.Errorf("deleting: %+v, hosted %v", d, s.Registry().Hosted("acme"))
		}
		if _, err := s.Update(ctx, "acme", spec("acme", "acme.example")); err != nil && !errors.Is(err, tenants.ErrDeleting) && !errors.Is(err, tenants.ErrNotFound) {
			t.Errorf("update of a deleting mesh: %v", err)
		}
		select {
		case got := <-p:
			if got != "acme keepCA=true" {
				t.Errorf("purged %s", got)
			}
		case <-time.After(wait):
			t.Fatal("the deleted mesh was not purged")
		}
		ev.next(t, "acme", func(_, cur *tenants.Mesh) bool { return cur == nil })

		again, err := s.Create(ctx, spec("acme", "acme.example"))
		if err != nil {
			t.Fatal(err)
		}
		if again.UID == m.UID || again.Generation != 1 || again.Config.GetRootNamespace() != "" {
			t.Errorf("a re-created mesh inherits: %+v (first %s)", again, m.UID)
		}
	})

	t.Run("SeedsOnceAndLeavesWhatIsThere", func(t *testing.T) {
		open := fresh(t)
		first := newService(t, open(), tenants.Options{})
		if _, err := first.Create(t.Context(), spec("acme", "acme.example", "limits: {spokes: 3}")); err != nil {
			t.Fatal(err)
		}
		seeds := []tenants.Seed{{Name: "default", TrustDomain: "cluster.local"}, {Name: "acme", TrustDomain: "acme.example"}}
		s := newService(t, open(), tenants.Options{Seeds: seeds})
		if got := s.Registry().Names(); fmt.Sprint(got) != "[acme default]" {
			t.Fatalf("meshes %v", got)
		}
		if m, _ := s.Registry().Get("acme"); m.Limits.Spokes != 3 {
			t.Errorf("seeding replaced a mesh already in the store: %+v", m)
		}
		ev := watch(s.Registry())
		run(t, s, make(purges, 10))
		if _, err := s.Delete(t.Context(), "default", false); err != nil {
			t.Fatal(err)
		}
		ev.next(t, "default", func(_, cur *tenants.Mesh) bool { return cur == nil })
		restarted := newService(t, open(), tenants.Options{Seeds: seeds})
		if got := restarted.Registry().Names(); fmt.Sprint(got) != "[acme]" {
			t.Errorf("after deleting a seeded mesh and a restart: %v; want it gone for good", got)
		}
	})

	t.Run("ConcurrentCreatesEndWithOneMesh", func(t *testing.T) {
		open := fresh(t)
		const racers = 6
		stores := make([]*tenants.Store, racers)
		for i := range stores {
			stores[i] = open()
		}
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				_, errs[i] = stores[i].Create(t.Context(), spec("race", fmt.Sprintf("race%d.example", i)))
			})
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, tenants.ErrExists):
				t.Errorf("racer %d: %v", i, err)
			}
		}
		s := newService(t, open(), tenants.Options{})
		if won != 1 || len(s.Registry().List()) != 1 {
			t.Errorf("%d creates succeeded, the store holds %v; want one", won, s.Registry().Names())
		}
	})

	t.Run("AnotherReplicaLearnsWithinSeconds", func(t *testing.T) {
		open := fresh(t)
		a := newService(t, open(), tenants.Options{})
		b := newService(t, open(), tenants.Options{})
		ev := watch(b.Registry())
		run(t, b, nil)
		start := time.Now()
		if _, err := a.Create(t.Context(), spec("news", "news.example")); err != nil {
			t.Fatal(err)
		}
		ev.next(t, "news", func(old, cur *tenants.Mesh) bool { return old == nil && cur != nil })
		created := time.Since(start)
		start = time.Now()
		if _, err := a.Delete(t.Context(), "news", false); err != nil {
			t.Fatal(err)
		}
		ev.next(t, "news", func(_, cur *tenants.Mesh) bool { return cur != nil && cur.Phase == tenants.Deleting })
		t.Logf("replica B learned of a mesh created on replica A after %v, of its deletion after %v (refresh interval %v)",
			created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), tenants.DefaultRefreshInterval)
	})
}

func TestDirStore(t *testing.T) {
	testStoreContract(t, func(t *testing.T) func() *tenants.Store {
		dir := t.TempDir()
		return func() *tenants.Store {
			s, err := tenants.OpenStore(ca.StoreDir, dir, "", "")
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}

// A vendor writes (or syncs from git) spec files into state.dir/meshes:
// the hub records them, keeps the last good version of one made bad, and
// deletes the mesh of one removed, keeping its CA.
func TestDirSpecsWrittenByHand(t *testing.T) {
	dir := t.TempDir()
	store, err := tenants.OpenStore(ca.StoreDir, dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	s := newService(t, store, tenants.Options{})
	refresh := func() {
		t.Helper()
		if _, err := s.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, tenants.StateSubdir, "acme.yaml")
	if err := os.WriteFile(file, spec("acme", "acme.example"), 0o644); err != nil {
		t.Fatal(err)
	}
	refresh()
	if _, ok := s.Registry().Get("acme"); ok {
		t.Fatal("a spec written by hand was taken up at its first read (it may be half-written)")
	}
	refresh()
	m, ok := s.Registry().Get("acme")
	if !ok || m.Phase != tenants.Active || m.Generation != 1 {
		t.Fatalf("a spec written by hand: %+v", m)
	}
	if err := os.WriteFile(file, spec("acme", "acme.example", "limits: {proxies: many}"), 0o644); err != nil {
		t.Fatal(err)
	}
	refresh()
	refresh()
	if cur, _ := s.Registry().Get("acme"); cur != m {
		t.Errorf("a bad spec replaced the last good one: %+v", cur)
	}
	restarted := newService(t, store, tenants.Options{})
	if cur, ok := restarted.Registry().Get("acme"); !ok || cur.UID != m.UID || cur.Generation != 1 || cur.Phase != tenants.Active {
		t.Errorf("a replica started while the spec is bad: %+v; want the last good one", cur)
	}
	if err := os.WriteFile(file, spec("acme", "acme.example", "limits: {proxies: 9}"), 0o644); err != nil {
		t.Fatal(err)
	}
	refresh()
	if cur, _ := s.Registry().Get("acme"); cur != m {
		t.Errorf("an edit was taken up at its first read: %+v", cur)
	}
	refresh()
	if cur, _ := s.Registry().Get("acme"); cur.Generation != 2 || cur.Limits.Proxies != 9 || cur.UID != m.UID {
		t.Errorf("a good edit: %+v", cur)
	}
	// A mesh's trust domain cannot change.
	if err := os.WriteFile(file, spec("acme", "moved.example", "limits: {proxies: 9}"), 0o644); err != nil {
		t.Fatal(err)
	}
	refresh()
	refresh()
	if cur, _ := s.Registry().Get("acme"); cur.TrustDomain != "acme.example" || cur.Generation != 2 {
		t.Errorf("a spec changing the trust domain was taken up: %+v", cur)
	}
	if err := os.WriteFile(file, spec("acme", "acme.example", "limits: {proxies: 9}"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file for another name, or with a trust domain taken, is refused.
	if err := os.WriteFile(filepath.Join(dir, tenants.StateSubdir, "other.yaml"), spec("acme", "x.example"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, tenants.StateSubdir, "twin.yaml"), spec("twin", "acme.example"), 0o644); err != nil {
		t.Fatal(err)
	}
	refresh()
	refresh()
	if got := s.Registry().Names(); fmt.Sprint(got) != "[acme]" {
		t.Errorf("meshes %v; want the misnamed and the twin refused", got)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	refresh()
	if !s.Registry().Hosted("acme") {
		t.Error("a spec gone at one read deleted its mesh (a checkout may remove and write it back)")
	}
	refresh()
	if cur, _ := s.Registry().Get("acme"); cur == nil || cur.Phase != tenants.Deleting || !cur.KeepCA {
		t.Errorf("after its spec was removed: %+v; want Deleting, keeping its CA", cur)
	}
}
