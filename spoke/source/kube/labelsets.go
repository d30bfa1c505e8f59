package kube

import (
	"runtime"
	"slices"
	"strconv"
	"sync"
	"unique"
	"weak"
)

// labelSets shares equal label maps among cached objects. The pods of one
// ReplicaSet carry the same labels, and a map of two labels decoded from
// the API server costs ~400 bytes with its strings: most of a large
// cluster's pod cache. A set stays in the table while an object holds it
// (a weak pointer, removed by a cleanup once it is collected). Safe for
// concurrent use: the informers' transforms run on their own goroutines.
type labelSets struct {
	mu   sync.Mutex
	sets map[string]weak.Pointer[labelSet]
}

// labelSet is a label map shared by the objects that hold it: never
// modified.
type labelSet struct{ labels map[string]string }

func newLabelSets() *labelSets {
	return &labelSets{sets: map[string]weak.Pointer[labelSet]{}}
}

// share returns the set equal to labels (labels itself the first time);
// nil for no labels. The caller holds the set for as long as it uses the
// set's map, which it must not modify.
func (t *labelSets) share(labels map[string]string) *labelSet {
	if len(labels) == 0 {
		return nil
	}
	key := labelsKey(labels)
	t.mu.Lock()
	defer t.mu.Unlock()
	if ls := t.sets[key].Value(); ls != nil {
		return ls
	}
	shared := make(map[string]string, len(labels))
	for k, v := range labels {
		shared[intern(k)] = intern(v)
	}
	ls := &labelSet{labels: shared}
	wp := weak.Make(ls)
	t.sets[key] = wp
	runtime.AddCleanup(ls, func(key string) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.sets[key] == wp {
			delete(t.sets, key)
		}
	}, key)
	return ls
}

// labelsKey is a label map's content as a string: each key and value,
// keys sorted, behind its length.
func labelsKey(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	n := 0
	for k, v := range labels {
		keys = append(keys, k)
		n += len(k) + len(v) + 8
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, ':')
		b = append(b, k...)
		v := labels[k]
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
	}
	return string(b)
}

// intern returns s's canonical copy: the names many cached objects repeat
// (namespaces, nodes, zones, service accounts, label keys and values) are
// then held once.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
