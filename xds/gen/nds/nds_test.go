package nds_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/nds"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

func service(t *testing.T, name, ns string, addrs ...string) *meshconfig.Object {
	t.Helper()
	return gentest.Registry(t, "Service", name, ns, &meshconfigv1.Service{
		Hostname: name + "." + ns + ".svc.cluster.local", Addresses: addrs,
		Ports: []*meshconfigv1.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
	})
}

func workload(t *testing.T, name, ns, host, addr, network string, health meshconfigv1.Workload_Health) *meshconfig.Object {
	t.Helper()
	return gentest.Registry(t, "Workload", name, ns, &meshconfigv1.Workload{Address: addr, Network: network, Health: health, Services: []string{host}})
}

const entries = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.example.com]
  ports: [{number: 9000, name: tcp, protocol: TCP}]
  location: MESH_EXTERNAL
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.example.com, "*.wild.example.com"]
  addresses: [10.9.9.9, 10.8.0.0/16]
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  location: MESH_EXTERNAL
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wildcard, namespace: shop}
spec:
  hosts: ["*.noaddr.example.com"]
  ports: [{number: 443, name: tls, protocol: TLS}]
  location: MESH_EXTERNAL
  resolution: NONE
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: private, namespace: shop}
spec:
  hosts: [private.example.com]
  addresses: [10.7.7.7]
  exportTo: ["."]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.7.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: shadow, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  addresses: [1.2.3.4]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.6.0.1}]
`

// inputs are two clusters: reviews in both (their own cluster IPs),
// ratings in c2 only, headless db in c1 with pods in both clusters and
// networks, and the ServiceEntries above (in c1).
func inputs(t *testing.T) []mesh.ClusterInput {
	t.Helper()
	const dbHost = "db.shop.svc.cluster.local"
	c1 := append(gentest.Decode(t, entries),
		service(t, "reviews", "shop", "10.96.0.1"),
		service(t, "db", "shop"),
		workload(t, "db-0", "shop", dbHost, "10.1.0.1", "n1", meshconfigv1.Workload_READY),
		workload(t, "db-1", "shop", dbHost, "10.1.0.2", "n1", meshconfigv1.Workload_NOT_READY),
		workload(t, "frontend", "web", "frontend.web.svc.cluster.local", "10.1.0.9", "n1", meshconfigv1.Workload_READY),
		service(t, "frontend", "web", "10.96.1.1"),
	)
	c2 := []*meshconfig.Object{
		service(t, "reviews", "shop", "10.200.0.1"),
		service(t, "ratings", "shop", "10.200.0.2"),
		service(t, "db", "shop"),
		workload(t, "db-2", "shop", dbHost, "10.2.0.1", "n1", meshconfigv1.Workload_READY),
		workload(t, "db-3", "shop", dbHost, "10.3.0.1", "n2", meshconfigv1.Workload_READY),
	}
	return []mesh.ClusterInput{
		{Name: "c1", Synced: true, Connected: true, Objects: c1},
		{Name: "c2", Synced: true, Connected: true, Objects: c2},
	}
}

func meshOf(t *testing.T) *mesh.Snapshot { return mesh.Build("m", inputs(t)) }

func ips(info *ndsv1.NameTable_NameInfo) string { return strings.Join(info.GetIps(), ",") }

// TestNameTable: the table of a sidecar in each cluster of a two-cluster
// mesh: Kubernetes services at the proxy's own cluster IP, else another
// cluster's; a headless service at its ready endpoints on the proxy's
// network, of both clusters; ServiceEntry hosts at their IP addresses
// (CIDRs left out), wildcard ones included only with an address; a host
// without one only for a proxy that captures DNS (its auto-allocated
// address); what is not exported to the proxy left out; a ServiceEntry's
// addresses for a Kubernetes host refused and reported.
func TestNameTable(t *testing.T) {
	s := meshOf(t)
	key := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", IPs: "10.1.0.9", Cluster: "c1", Network: "n1"}
	nt, problems := nds.Generate(scope.New(s, key))
	got := map[string]string{}
	for h, info := range nt.GetTable() {
		got[h] = ips(info) + " " + info.GetRegistry() + " " + info.GetShortname() + "." + info.GetNamespace()
	}
	want := map[string]string{
		"reviews.shop.svc.cluster.local": "10.96.0.1 Kubernetes reviews.shop",
		"ratings.shop.svc.cluster.local": "10.200.0.2 Kubernetes ratings.shop",
		"db.shop.svc.cluster.local":      "10.1.0.1,10.2.0.1 Kubernetes db.shop",
		"frontend.web.svc.cluster.local": "10.96.1.1 Kubernetes frontend.web",
		"db.example.com":                 "10.9.9.9 External .",
		"*.wild.example.com":             "10.9.9.9 External .",
	}
	for h, w := range want {
		if got[h] != w {
			t.Errorf("%s: %q, want %q", h, got[h], w)
		}
	}
	for h := range got {
		if _, ok := want[h]; !ok {
			t.Errorf("unexpected entry %s: %q", h, got[h])
		}
	}
	if len(problems) != 1 || problems[0].Resource != "c1:ServiceEntry shop/shadow" || problems[0].Field != "spec.addresses" ||
		!strings.Contains(problems[0].Reason, "the proxy's cluster c1") || !strings.Contains(problems[0].Reason, "1.2.3.4") {
		t.Errorf("problems = %+v; want the shadowing ServiceEntry's addresses refused", problems)
	}

	// In c2: its own reviews; the same refusal (c2 has reviews too).
	key.Cluster = "c2"
	nt, _ = nds.Generate(scope.New(s, key))
	if got := ips(nt.GetTable()["reviews.shop.svc.cluster.local"]); got != "10.200.0.1" {
		t.Errorf("reviews for a proxy of c2: %s, want its own 10.200.0.1", got)
	}

	// Capturing DNS: the address-less host at its auto-allocated address.
	key.DNSCapture = true
	nt, _ = nds.Generate(scope.New(s, key))
	api := s.Services["api.example.com"]
	if got := ips(nt.GetTable()["api.example.com"]); got == "" || got != api.AutoAddresses[0] {
		t.Errorf("api.example.com for a DNS-capturing proxy: %q, want its auto-allocated %v", got, api.AutoAddresses)
	}
	if _, ok := nt.GetTable()["*.noaddr.example.com"]; ok {
		t.Error("a wildcard host without an address is in the table")
	}
	// An IPv6 proxy gets the IPv6 one.
	key.IPs = "fd00::9"
	nt, _ = nds.Generate(scope.New(s, key))
	if got := ips(nt.GetTable()["api.example.com"]); got != api.AutoAddresses[1] || !strings.HasPrefix(got, "2001:2::f0f0:") {
		t.Errorf("api.example.com for an IPv6 proxy: %q, want %s", got, api.AutoAddresses[1])
	}

	// The shop namespace sees its private host.
	key = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Cluster: "c1"}
	nt, _ = nds.Generate(scope.New(s, key))
	if got := ips(nt.GetTable()["private.example.com"]); got != "10.7.7.7" {
		t.Errorf("private.example.com from its own namespace: %q, want 10.7.7.7", got)
	}

	// A proxyless key: an empty table.
	nt, problems = nds.Generate(scope.New(s, proxy.Key{Type: proxy.GRPC, Mesh: "m"}))
	if len(nt.GetTable()) != 0 || len(problems) != 0 {
		t.Errorf("proxyless table %v, problems %v; want both empty", nt.GetTable(), problems)
	}
}

// TestNameTableFollowsTheSidecarScope: a Sidecar whose egress names only
// its namespace's hosts scopes the table to them, as the proxy's
// listeners are.
func TestNameTableFollowsTheSidecarScope(t *testing.T) {
	objs := gentest.Decode(t, `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: web}
spec:
  egress: [{hosts: ["./*", "shop/ratings.shop.svc.cluster.local"]}]
`)
	s := mesh.Build("m", append(inputs(t), mesh.ClusterInput{Name: "c3", Synced: true, Connected: true, Objects: objs}))
	key := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", Cluster: "c1"}
	nt, _ := nds.Generate(scope.New(s, key))
	var hosts []string
	for h := range nt.GetTable() {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	if want := []string{"frontend.web.svc.cluster.local", "ratings.shop.svc.cluster.local"}; !slices.Equal(hosts, want) {
		t.Errorf("hosts of a Sidecar-scoped proxy: %v, want %v", hosts, want)
	}
}
