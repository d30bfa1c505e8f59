package kube

import (
	"maps"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/testwait"
)

// Pods with equal labels share one map, equal to theirs; other labels get
// their own.
func TestPodsShareEqualLabels(t *testing.T) {
	sets := newLabelSets()
	transform := transformPod(sets)
	cached := func(name string, labels map[string]string) *pod {
		t.Helper()
		out, err := transform(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels}})
		if err != nil {
			t.Fatal(err)
		}
		return out.(*pod)
	}
	a := cached("a", map[string]string{"app": "web", "version": "v1"})
	b := cached("b", map[string]string{"version": "v1", "app": "web"})
	c := cached("c", map[string]string{"app": "web", "version": "v2"})
	d := cached("d", map[string]string{"app": "web=version", "": "v1"})
	none := cached("e", nil)
	if a.labelSet != b.labelSet {
		t.Error("pods with equal labels do not share them")
	}
	if a.labelSet == c.labelSet || a.labelSet == d.labelSet {
		t.Error("pods with different labels share them")
	}
	for _, p := range []*pod{a, b} {
		if !maps.Equal(p.labels, map[string]string{"app": "web", "version": "v1"}) {
			t.Errorf("pod %s labels %v", p.name, p.labels)
		}
	}
	if !maps.Equal(d.labels, map[string]string{"app": "web=version", "": "v1"}) {
		t.Errorf("pod d labels %v", d.labels)
	}
	if none.labelSet != nil || none.labels != nil {
		t.Errorf("pod without labels holds %v", none.labels)
	}
}

// A set no pod holds any more leaves the table.
func TestLabelSetsForgetUnheldSets(t *testing.T) {
	sets := newLabelSets()
	kept := sets.share(map[string]string{"app": "kept"})
	sets.share(map[string]string{"app": "dropped"})
	size := func() int {
		sets.mu.Lock()
		defer sets.mu.Unlock()
		return len(sets.sets)
	}
	testwait.Until(t, "the unheld set to leave the table", func() bool {
		runtime.GC()
		return size() == 1
	})
	if again := sets.share(map[string]string{"app": "kept"}); again != kept {
		t.Error("a held set was not shared")
	}
	runtime.KeepAlive(kept)
}
