package xdsbootstrap

import (
	"fmt"
	"slices"
	"testing"
)

func replicas(n int) []Replica {
	var rs []Replica
	for i := range n {
		rs = append(rs, Replica{Name: fmt.Sprintf("nave-hub-%d", i), Address: fmt.Sprintf("10.0.0.%d:15012", i+1)})
	}
	return rs
}

func names(rs []Replica) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

// TestHomeOrder: every replica listed once, the same order for the same
// namespace whatever the input order, namespaces spread over the replicas,
// and removing a replica keeps the others' order (a namespace homed
// elsewhere keeps its home).
func TestHomeOrder(t *testing.T) {
	rs := replicas(3)
	homes := map[string]int{}
	for i := range 300 {
		ns := fmt.Sprintf("ns-%d", i)
		got := names(HomeOrder("default", ns, rs))
		if s := slices.Sorted(slices.Values(got)); !slices.Equal(s, names(rs)) {
			t.Fatalf("%s: order %v is not a permutation of %v", ns, got, names(rs))
		}
		rev := slices.Clone(rs)
		slices.Reverse(rev)
		if again := names(HomeOrder("default", ns, rev)); !slices.Equal(again, got) {
			t.Fatalf("%s: order %v from reversed input, %v before", ns, again, got)
		}
		homes[got[0]]++
		for drop := range rs {
			fewer := slices.Delete(slices.Clone(rs), drop, drop+1)
			want := slices.DeleteFunc(slices.Clone(got), func(n string) bool { return n == rs[drop].Name })
			if after := names(HomeOrder("default", ns, fewer)); !slices.Equal(after, want) {
				t.Fatalf("%s without %s: order %v, want %v", ns, rs[drop].Name, after, want)
			}
		}
	}
	for _, r := range rs {
		if homes[r.Name] < 60 {
			t.Errorf("homes of 300 namespaces over 3 replicas: %v, %s has under 60", homes, r.Name)
		}
	}
	if a, b := HomeOrder("m1", "ns", rs), HomeOrder("m2", "ns", rs); slices.Equal(names(a), names(b)) && a[0] == b[0] {
		// Not an error by itself: two meshes may share an order. Only
		// documents that the mesh is part of the hash.
		t.Logf("meshes m1 and m2 share the order of ns: %v", names(a))
	}
}

func TestParseReplica(t *testing.T) {
	r, err := ParseReplica("nave-hub-0=nave-hub-0.nave-hub-gossip.nave-system.svc:15012")
	if err != nil || r.Name != "nave-hub-0" || r.Address != "nave-hub-0.nave-hub-gossip.nave-system.svc:15012" {
		t.Fatalf("ParseReplica: %+v, %v", r, err)
	}
	for _, bad := range []string{"", "hub-0", "=10.0.0.1:15012", "hub-0=10.0.0.1", "hub-0=:x:y"} {
		if _, err := ParseReplica(bad); err == nil {
			t.Errorf("ParseReplica(%q): no error", bad)
		}
	}
}
