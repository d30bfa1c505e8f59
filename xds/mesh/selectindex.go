package mesh

import (
	"slices"

	networking "istio.io/api/networking/v1alpha3"
)

// selectIndex finds the WorkloadEntries and Workloads a label selector in
// a namespace selects without scanning them all: candidates come from the
// shortest posting list of one of the selector's key=value pairs, then the
// whole selector is checked. Results keep the input order.
type selectIndex struct {
	entries   []indexed
	workloads []indexed
	// postings maps namespace\x00key\x00value to entry (or workload)
	// positions, ascending.
	entryPostings    map[posting][]int
	workloadPostings map[posting][]int
	// entryEndpoint converts a selected WorkloadEntry (the Builder's cache).
	entryEndpoint func(wc *Config) *Endpoint
}

type posting struct{ namespace, key, value string }

type indexed struct {
	cfg    *Config
	labels map[string]string // for entries, metadata labels merged with spec labels
}

func newSelectIndex(workloadEntries, workloads []*Config) *selectIndex {
	x := &selectIndex{entryPostings: map[posting][]int{}, workloadPostings: map[posting][]int{}}
	for i, wc := range workloadEntries {
		we, _ := wc.Object.Spec.(*networking.WorkloadEntry)
		labels := mergeLabels(wc.Object.Labels, we.GetLabels())
		x.entries = append(x.entries, indexed{wc, labels})
		for k, v := range labels {
			key := posting{wc.Object.Namespace, k, v}
			x.entryPostings[key] = append(x.entryPostings[key], i)
		}
	}
	for i, wc := range workloads {
		x.workloads = append(x.workloads, indexed{wc, wc.Object.Labels})
		for k, v := range wc.Object.Labels {
			key := posting{wc.Object.Namespace, k, v}
			x.workloadPostings[key] = append(x.workloadPostings[key], i)
		}
	}
	return x
}

// selectEntries calls fn for each WorkloadEntry of namespace ns whose
// labels match sel (non-empty), in input order.
func (x *selectIndex) selectEntries(ns string, sel map[string]string, fn func(c *Config)) {
	x.match(x.entries, x.entryPostings, ns, sel, fn)
}

// selectWorkloads is selectEntries for the registry's Workloads.
func (x *selectIndex) selectWorkloads(ns string, sel map[string]string, fn func(c *Config)) {
	x.match(x.workloads, x.workloadPostings, ns, sel, fn)
}

func (x *selectIndex) match(items []indexed, postings map[posting][]int, ns string, sel map[string]string, fn func(c *Config)) {
	var best []int
	first := true
	for k, v := range sel {
		p := postings[posting{ns, k, v}]
		if len(p) == 0 {
			return // nothing has this pair: nothing matches
		}
		if first || len(p) < len(best) {
			best, first = p, false
		}
	}
	if !slices.IsSorted(best) {
		best = slices.Sorted(slices.Values(best))
	}
	for _, i := range best {
		if Matches(sel, items[i].labels) {
			fn(items[i].cfg)
		}
	}
}
