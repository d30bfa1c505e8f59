package cache_test

import (
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
	"github.com/navemesh/nave/xds/resource"
)

func nameTable(t *testing.T, res *resource.ProxyResources) map[string]*ndsv1.NameTable_NameInfo {
	t.Helper()
	byName := res.Resources[typeurl.NameTable]
	if len(byName) != 1 {
		t.Fatalf("%d name tables, want 1", len(byName))
	}
	var nt ndsv1.NameTable
	for _, p := range byName {
		if err := p.Any.UnmarshalTo(&nt); err != nil {
			t.Fatal(err)
		}
	}
	return nt.GetTable()
}

// TestDNSCaptureKeysGenerationOnlyWhileItMatters: a sidecar that captures
// DNS shares its neighbours' generation while the mesh has no
// auto-allocated address, and gets listeners on them once it has; its
// name table follows, is reused for a change of endpoints it does not
// read, and a proxyless key gets an empty one.
func TestDNSCaptureKeysGenerationOnlyWhileItMatters(t *testing.T) {
	w := &world{t: t, objs: map[string]*meshconfig.Object{}}
	w.put("SE/db", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.demo.example]
  addresses: [10.9.0.100]
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: STATIC
  workloadSelector: {labels: {app: db}}
`)
	w.put("WE/db-1", workloadEntry("db-1", "demo", "db", "10.9.1.1", "v1", "a", 5432, 1))
	src := pushctxtest.NewSource()
	m, c := start(t, src, cache.Options{Verify: true})
	publish := publisher(t, src, m, c, w)
	capture := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", IPs: "10.9.9.1", DNSCapture: true}
	plain := capture
	plain.DNSCapture = false

	st1 := publish()
	if st1.ForProxy(capture) != st1.ForProxy(plain) {
		t.Error("without auto-allocated addresses, DNS capture tells sidecars apart")
	}
	if got := nameTable(t, st1.NameTableFor(capture)); len(got) != 1 || got["db.demo.example"].GetIps()[0] != "10.9.0.100" {
		t.Errorf("name table %v, want db.demo.example at 10.9.0.100", got)
	}

	w.put("SE/api", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: demo}
spec:
  hosts: [api.example.com]
  ports: [{number: 9000, name: tcp, protocol: TCP}]
  location: MESH_EXTERNAL
  resolution: DNS
`)
	st2 := publish()
	api := st2.State.Snapshot.Services["api.example.com"].AutoAddresses
	listener := api[0] + "_9000"
	rc, rp := st2.ForProxy(capture), st2.ForProxy(plain)
	if rc.Resources[typeurl.Listener][listener] == nil {
		t.Errorf("the DNS-capturing sidecar has no listener %s", listener)
	}
	if rp.Resources[typeurl.Listener][listener] != nil {
		t.Errorf("a sidecar that does not capture DNS has listener %s", listener)
	}
	tc, tp := nameTable(t, st2.NameTableFor(capture)), nameTable(t, st2.NameTableFor(plain))
	if got := tc["api.example.com"].GetIps(); len(got) != 1 || got[0] != api[0] {
		t.Errorf("api.example.com in the capturing sidecar's table: %v, want [%s]", got, api[0])
	}
	if _, ok := tp["api.example.com"]; ok {
		t.Error("api.example.com is in the table of a sidecar that does not capture DNS")
	}

	// db's endpoints move: db has an address, so the table is reused.
	table := st2.NameTableFor(capture)
	w.put("WE/db-1", workloadEntry("db-1", "demo", "db", "10.9.1.2", "v1", "a", 5432, 1))
	st3 := publish()
	if st3.State.Diff.Config {
		t.Fatalf("diff %+v, want endpoints only", st3.State.Diff)
	}
	if st3.NameTableFor(capture) != table {
		t.Error("an endpoint change the table does not read regenerated it")
	}

	grpc := nameTable(t, st3.NameTableFor(proxy.Key{Type: proxy.GRPC, Mesh: "m"}))
	if len(grpc) != 0 {
		t.Errorf("a proxyless key's table: %v, want empty", grpc)
	}
	if !strings.HasPrefix(listener, "240.240.") {
		t.Errorf("listener %s is not on an auto-allocated address", listener)
	}
}

// TestNameTableProblemsAreReported: a ServiceEntry giving a Kubernetes
// Service's host other addresses is refused for the name table, and the
// refusal is among the State's problems (/debug/meshes).
func TestNameTableProblemsAreReported(t *testing.T) {
	w := &world{t: t, objs: map[string]*meshconfig.Object{}}
	k, err := meshconfig.KindFor("nave.io/v1", "Service")
	if err != nil {
		t.Fatal(err)
	}
	svc := &meshconfig.Object{Kind: k, Name: "reviews", Namespace: "demo", Spec: &meshconfigv1.Service{
		Hostname: "reviews.demo.svc.cluster.local", Addresses: []string{"10.96.0.1"},
		Ports: []*meshconfigv1.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}}}}
	svc.Version = svc.ComputeVersion()
	w.objs["Service/reviews"] = svc
	w.put("SE/shadow", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: shadow, namespace: demo}
spec:
  hosts: [reviews.demo.svc.cluster.local]
  addresses: [1.2.3.4]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
`)
	src := pushctxtest.NewSource()
	m, c := start(t, src, cache.Options{Verify: true})
	st := publisher(t, src, m, c, w)()
	key := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", Cluster: "c1", DNSCapture: true}
	if got := nameTable(t, st.NameTableFor(key))["reviews.demo.svc.cluster.local"].GetIps(); len(got) != 1 || got[0] != "10.96.0.1" {
		t.Errorf("reviews resolves to %v, want the Service's 10.96.0.1", got)
	}
	found := false
	for _, p := range st.AllProblems() {
		found = found || (p.Resource == "c1:ServiceEntry demo/shadow" && p.Field == "spec.addresses" && strings.Contains(p.Reason, "1.2.3.4"))
	}
	if !found {
		t.Errorf("the refused addresses are not among the problems: %+v", st.AllProblems())
	}
}
