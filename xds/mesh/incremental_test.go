package mesh

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
)

func decodeOne(t *testing.T, y string) *meshconfig.Object {
	t.Helper()
	objs := decode(t, y)
	if len(objs) != 1 {
		t.Fatalf("%d objects", len(objs))
	}
	return objs[0]
}

func hostsOf(svcs []*Service) string {
	var out []string
	for _, s := range svcs {
		out = append(out, s.Hostname+fmt.Sprint(len(s.Endpoints)))
	}
	return fmt.Sprint(out)
}

func snapshotJSON(t *testing.T, s *Snapshot) string {
	t.Helper()
	b, err := json.Marshal(struct {
		Services  map[string]*Service
		Conflicts []Conflict
		Problems  []Problem
		Clusters  []ClusterState
		VS, DR    map[string][]string
		AllVS     []string
		Hostnames []string
		Security  []string
		Trust     string
	}{s.Services, s.Conflicts, s.Problems, s.Clusters, refsByHost(s.VirtualServices), refsByHost(s.DestinationRules), refs(s.AllVirtualServices), s.Hostnames(),
		securityRefs(s), s.TrustDomain})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// refsByHost names the configs of each host, in order (refs).
func refsByHost(byHost map[string][]*Config) map[string][]string {
	out := map[string][]string{}
	for host, list := range byHost {
		out[host] = refs(list)
	}
	return out
}

// refs names configs, in order, with the cluster and version of each.
func refs(list []*Config) []string {
	var out []string
	for _, c := range list {
		out = append(out, c.Ref()+"@"+c.Cluster+"@"+c.Object.Version)
	}
	return out
}

func securityRefs(s *Snapshot) []string {
	var out []string
	for _, list := range [][]*Config{s.PeerAuthentications, s.RequestAuthentications, s.AuthorizationPolicies} {
		for _, c := range list {
			out = append(out, c.Ref()+"@"+c.Object.Version)
		}
	}
	return out
}

// objectKey names a test's object in cluster c1 or c2.
type objectKey struct{ cluster, id string }

// twoClusters is the input of clusters c1 and c2 holding objs, c2 stale
// (and disconnected) when staleC2.
func twoClusters(objs map[objectKey]*meshconfig.Object, staleC2 bool) []ClusterInput {
	byCluster := map[string][]*meshconfig.Object{}
	for k, o := range objs {
		byCluster[k.cluster] = append(byCluster[k.cluster], o)
	}
	return []ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: byCluster["c1"]},
		{Name: "c2", Synced: true, Connected: !staleC2, Stale: staleC2, Objects: byCluster["c2"]}}
}

// compareWithFullBuilds builds steps times with one Builder, calling
// change before each build but the first, and fails unless each
// snapshot, and its address index (for every endpoint address and
// 10.0.0-2.1-40), equals a fresh Build's; visit sees each fresh snapshot.
// It returns how many builds were incremental.
func compareWithFullBuilds(t *testing.T, steps int, inputs func() []ClusterInput, change func(), visit func(full *Snapshot)) int {
	t.Helper()
	var b Builder
	incremental := 0
	for step := range steps {
		if step > 0 {
			change()
		}
		in := inputs()
		last := b.last
		got := b.Build("m", in)
		if b.last == last && last != nil {
			incremental++
		}
		full := Build("m", in)
		if g, w := snapshotJSON(t, got), snapshotJSON(t, full); g != w {
			t.Fatalf("step %d: the Builder's snapshot differs from a full build:\n%s\n%s", step, g, w)
		}
		// The address index answers alike, for every address there is.
		for a := range 48 {
			addr := fmt.Sprintf("10.0.%d.%d", a/16, 1+a%40)
			if g, w := hostsOf(got.ServicesAt(addr)), hostsOf(full.ServicesAt(addr)); g != w {
				t.Fatalf("step %d: ServicesAt(%s) = %s, a full build says %s", step, addr, g, w)
			}
		}
		for _, svc := range full.Services {
			for _, ep := range svc.Endpoints {
				if g, w := hostsOf(got.ServicesAt(ep.Address)), hostsOf(full.ServicesAt(ep.Address)); g != w {
					t.Fatalf("step %d: ServicesAt(%s) = %s, a full build says %s", step, ep.Address, g, w)
				}
			}
		}
		if visit != nil {
			visit(full)
		}
	}
	return incremental
}

// TestIncrementalBuildMatchesFullBuild applies random changes — mostly
// WorkloadEntries moving, relabelled, added and removed, sometimes a
// duplicate in another cluster, a ServiceEntry change, a host defined
// twice, or a stale cluster — and compares the Builder's result (which
// updates only affected services when it can) with a fresh Build.
func TestIncrementalBuildMatchesFullBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	se := func(name, ns, app, extraHost string) string {
		hosts := fmt.Sprintf("[%s.%s.svc.cluster.local]", name, ns)
		if extraHost != "" {
			hosts = fmt.Sprintf("[%s.%s.svc.cluster.local, %s]", name, ns, extraHost)
		}
		return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: %s}\n"+
			"spec:\n  hosts: %s\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: STATIC\n"+
			"  workloadSelector: {labels: {app: %s}}\n", name, ns, hosts, app)
	}
	we := func(name, ns, app, addr string) string {
		return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: %s, namespace: %s}\n"+
			"spec: {address: %s, labels: {app: %s}}\n", name, ns, addr, app)
	}
	objs := map[objectKey]*meshconfig.Object{}
	apps := []string{"a", "b", "c"}
	nss := []string{"ns-x", "ns-y"}
	for _, ns := range nss {
		for _, app := range apps {
			objs[objectKey{"c1", "se-" + ns + app}] = decodeOne(t, se("svc-"+app, ns, app, ""))
		}
	}
	for i := range 30 {
		objs[objectKey{"c1", fmt.Sprint("we-", i)}] = decodeOne(t, we(fmt.Sprint("we-", i), nss[i%2], apps[i%3], fmt.Sprintf("10.0.0.%d", i+1)))
	}
	staleC2 := false
	incremental := compareWithFullBuilds(t, 400, func() []ClusterInput { return twoClusters(objs, staleC2) }, func() {
		i := rng.IntN(40)
		name, ns, app := fmt.Sprint("we-", i), nss[rng.IntN(2)], apps[rng.IntN(3)]
		switch r := rng.IntN(100); {
		case r < 60: // an entry moves, is relabelled or added
			objs[objectKey{"c1", name}] = decodeOne(t, we(name, ns, app, fmt.Sprintf("10.0.%d.%d", rng.IntN(3), 1+rng.IntN(40))))
		case r < 80:
			delete(objs, objectKey{"c1", name})
		case r < 86: // the same entry in the other cluster: a conflict
			objs[objectKey{"c2", name}] = decodeOne(t, we(name, ns, app, "10.9.9.9"))
		case r < 90:
			delete(objs, objectKey{"c2", name})
		case r < 94: // a ServiceEntry change, sometimes sharing a host with another
			extra := ""
			if rng.IntN(2) == 0 {
				extra = "shared.example"
			}
			objs[objectKey{"c1", "se-" + ns + app}] = decodeOne(t, se("svc-"+app, ns, app, extra))
		case r < 97:
			staleC2 = !staleC2
		default: // a security policy changes: never an endpoint-only build
			objs[objectKey{"c1", "pa-" + ns}] = decodeOne(t, fmt.Sprintf("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\n"+
				"metadata: {name: default, namespace: %s}\nspec: {mtls: {mode: %s}}\n", ns, []string{"STRICT", "PERMISSIVE"}[rng.IntN(2)]))
		}
	}, nil)
	if incremental < 100 {
		t.Errorf("only %d of 400 builds were incremental: the test does not exercise the fast path", incremental)
	}
}

// TestIncrementalRoutingBuildMatchesFullBuild edits DestinationRules and
// VirtualServices at random — a rule's policy or host changes, a rule is
// added or deleted, a second rule for a host in the same namespace (a
// problem), rules of short and wildcard hosts, a rule defined in the
// other cluster too (a conflict), VirtualServices added, edited and
// deleted beside one translated from a Gateway API route, sometimes with
// a WorkloadEntry move, rarely a ServiceEntry change — and compares the
// Builder's result (which rebuilds only the rules and VirtualServices
// when nothing else changed) with a fresh Build.
func TestIncrementalRoutingBuildMatchesFullBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	objs := map[objectKey]*meshconfig.Object{}
	for i, app := range []string{"a", "b"} {
		objs[objectKey{"c1", "se-" + app}] = decodeOne(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"+
			"metadata: {name: svc-%[1]s, namespace: ns-x}\nspec:\n  hosts: [svc-%[1]s.ns-x.svc.cluster.local, \"*.%[1]s.example\"]\n"+
			"  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: STATIC\n  workloadSelector: {labels: {app: %[1]s}}\n", app))
		objs[objectKey{"c1", "we-" + app}] = decodeOne(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\n"+
			"metadata: {name: we-%[1]s, namespace: ns-x}\nspec: {address: 10.0.0.%[2]d, labels: {app: %[1]s}}\n", app, i+1))
	}
	objs[objectKey{"c1", "grpcroute"}] = decodeOne(t, `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g, namespace: ns-x}
spec:
  parentRefs: [{group: "", kind: Service, name: svc-a, port: 80}]
  rules: [{backendRefs: [{name: svc-b, port: 80}]}]
`)
	hosts := []string{"svc-a", "svc-b.ns-x.svc.cluster.local", `"*.a.example"`, "other.example"}
	rule := func(name, ns string) *meshconfig.Object {
		return decodeOne(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: %s, namespace: %s}\n"+
			"spec:\n  host: %s\n  trafficPolicy: {loadBalancer: {simple: %s}}\n", name, ns, hosts[rng.IntN(len(hosts))],
			[]string{"ROUND_ROBIN", "RANDOM", "LEAST_REQUEST"}[rng.IntN(3)]))
	}
	generated := false
	incremental := compareWithFullBuilds(t, 300, func() []ClusterInput { return twoClusters(objs, false) }, func() {
		name, ns := fmt.Sprint("dr-", rng.IntN(6)), []string{"ns-x", "ns-y", "istio-system"}[rng.IntN(3)]
		switch r := rng.IntN(130); {
		case r < 60:
			objs[objectKey{"c1", name + ns}] = rule(name, ns)
		case r < 75:
			delete(objs, objectKey{"c1", name + ns})
		case r < 80: // the same rule in the other cluster: a conflict
			objs[objectKey{"c2", name + ns}] = rule(name, ns)
		case r < 85:
			delete(objs, objectKey{"c2", name + ns})
		case r < 88: // with a WorkloadEntry move
			objs[objectKey{"c1", name + ns}] = rule(name, ns)
			objs[objectKey{"c1", "we-a"}] = decodeOne(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\n"+
				"metadata: {name: we-a, namespace: ns-x}\nspec: {address: 10.0.0.%d, labels: {app: a}}\n", 1+rng.IntN(9)))
		case r < 95:
			delete(objs, objectKey{"c1", "vs-" + ns})
		case r < 98: // a ServiceEntry changes: never a routing-only build
			objs[objectKey{"c1", "se-b"}] = decodeOne(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"+
				"metadata: {name: svc-b, namespace: ns-x}\nspec:\n  hosts: [svc-b.ns-x.svc.cluster.local]\n"+
				"  ports: [{number: %d, name: http, protocol: HTTP}]\n  resolution: STATIC\n  workloadSelector: {labels: {app: b}}\n", 80+rng.IntN(2)))
		default: // a VirtualService changes, its hosts short, long or a wildcard
			objs[objectKey{"c1", "vs-" + ns}] = decodeOne(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: VirtualService\n"+
				"metadata: {name: vs, namespace: %s}\nspec:\n  hosts: [%s]\n  http: [{timeout: %ds, route: [{destination: {host: svc-a.ns-x.svc.cluster.local}}]}]\n",
				ns, hosts[rng.IntN(len(hosts))], 1+rng.IntN(9)))
		}
	}, func(full *Snapshot) {
		generated = generated || slices.ContainsFunc(full.AllVirtualServices, func(c *Config) bool { return c.Object.Name != "vs" })
	})
	if incremental < 150 {
		t.Errorf("only %d of 300 builds were incremental: the test does not exercise the routing path", incremental)
	}
	if !generated {
		t.Error("no VirtualService was translated from the Gateway API route")
	}
}

// TestUnchangedInputGivesTheSameSnapshot: a build whose input holds the
// very objects of the last one (a notification the last build already
// took along) returns the last snapshot itself, not a full merge; a
// change after it is built from there as usual.
func TestUnchangedInputGivesTheSameSnapshot(t *testing.T) {
	objs := map[objectKey]*meshconfig.Object{
		{"c1", "se"}: decodeOne(t, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: svc, namespace: ns}\n"+
			"spec:\n  hosts: [svc.ns.svc.cluster.local]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: STATIC\n"+
			"  workloadSelector: {labels: {app: a}}\n"),
		{"c1", "we"}: decodeOne(t, "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: we, namespace: ns}\n"+
			"spec: {address: 10.0.0.1, labels: {app: a}}\n"),
	}
	var b Builder
	first := b.Build("m", twoClusters(objs, false))
	if again := b.Build("m", twoClusters(objs, false)); again != first {
		t.Fatal("an unchanged input was merged again into a new snapshot")
	}
	objs[objectKey{"c1", "we"}] = decodeOne(t, "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: we, namespace: ns}\n"+
		"spec: {address: 10.0.0.2, labels: {app: a}}\n")
	last := b.last
	moved := b.Build("m", twoClusters(objs, false))
	if moved == first || b.last != last {
		t.Fatal("the move after an unchanged build was not built incrementally")
	}
	if g, w := snapshotJSON(t, moved), snapshotJSON(t, Build("m", twoClusters(objs, false))); g != w {
		t.Fatalf("after an unchanged build, the move differs from a full build:\n%s\n%s", g, w)
	}
	// A cluster's state is input too: a stale cluster is no unchanged input.
	if stale := b.Build("m", twoClusters(objs, true)); stale == moved {
		t.Fatal("a cluster turning stale returned the last snapshot")
	}
}
