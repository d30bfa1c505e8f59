package mesh

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
)

// TestSelectIndexMatchesAScan compares the index with checking every
// workload, for random labels and selectors.
func TestSelectIndexMatchesAScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys, values, nss := []string{"app", "version", "tier"}, []string{"a", "b", "c"}, []string{"x", "y"}
	randLabels := func(n int) map[string]string {
		m := map[string]string{}
		for range n {
			m[keys[rng.IntN(len(keys))]] = values[rng.IntN(len(values))]
		}
		return m
	}
	var entries, workloads []*Config
	for i := range 200 {
		meta := randLabels(rng.IntN(2))
		entries = append(entries, &Config{Cluster: "c1", Object: &meshconfig.Object{Name: fmt.Sprint("we-", i), Namespace: nss[rng.IntN(2)],
			Labels: meta, Spec: &networking.WorkloadEntry{Labels: randLabels(1 + rng.IntN(2))}}})
		workloads = append(workloads, &Config{Cluster: "c1", Object: &meshconfig.Object{Name: fmt.Sprint("w-", i), Namespace: nss[rng.IntN(2)],
			Labels: randLabels(1 + rng.IntN(3))}})
	}
	x := newSelectIndex(entries, workloads)
	for range 300 {
		sel, ns := randLabels(1+rng.IntN(2)), nss[rng.IntN(2)]
		var got, want []*Config
		x.selectEntries(ns, sel, func(c *Config) { got = append(got, c) })
		for _, c := range entries {
			we := c.Object.Spec.(*networking.WorkloadEntry)
			if c.Object.Namespace == ns && Matches(sel, mergeLabels(c.Object.Labels, we.GetLabels())) {
				want = append(want, c)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("entries selected by %v in %s: index %d, scan %d", sel, ns, len(got), len(want))
		}
		got, want = nil, nil
		x.selectWorkloads(ns, sel, func(c *Config) { got = append(got, c) })
		for _, c := range workloads {
			if c.Object.Namespace == ns && Matches(sel, c.Object.Labels) {
				want = append(want, c)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("workloads selected by %v in %s: index %d, scan %d", sel, ns, len(got), len(want))
		}
	}
}
