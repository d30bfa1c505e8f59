package mesh

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
		VS, DR    int
		Hostnames []string
		Security  []string
		Trust     string
	}{s.Services, s.Conflicts, s.Problems, s.Clusters, len(s.VirtualServices), len(s.DestinationRules), s.Hostnames(),
		securityRefs(s), s.TrustDomain})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
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
