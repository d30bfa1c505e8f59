package files

import (
	"fmt"
	"strings"

	"github.com/navemesh/nave/shared/meshconfig"
)

// keptNote is appended to the reason of a rejection whose object (or
// file) keeps its last good version.
const keptNote = "; the last good version is kept"

// settle decides, object key by object key, what a load publishes, from
// the load's candidates (every valid object, in path order, duplicates
// included) and the objects live until now (prev). For each key:
//
//  1. a candidate from the file the live object came from wins: an edit
//     applies, and a newcomer elsewhere never displaces the live object
//     (docs/design.md invariant 8: no removal that no one made);
//  2. else the live object stays as it is when the load failed on it
//     (keepLastGood), so that a broken edit never withdraws config that
//     worked (invariant 3);
//  3. else the live object stays while hold says so: its file changed in
//     this round and may be half-written (Source.holdWithdrawal);
//  4. else the first candidate in path order wins (at start, nothing is
//     live).
//
// Every other candidate is rejected as a duplicate, naming where the one
// kept is. An object removed from a file that loads fine is gone, and so
// are the objects of a deleted file: those are edits, not errors.
func settle(prev []*meshconfig.Object, res *loadResult, hold func(live *meshconfig.Object) bool) {
	live := make(map[string]*meshconfig.Object, len(prev))
	for _, o := range prev {
		live[keyOf(o)] = o
	}
	var (
		order  []string
		byKey  = map[string][]*meshconfig.Object{}
		winner = map[string]*meshconfig.Object{}
	)
	for _, o := range res.objects {
		k := keyOf(o)
		if _, seen := byKey[k]; !seen {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], o)
	}
	for _, o := range prev {
		if k := keyOf(o); byKey[k] == nil {
			order = append(order, k)
		}
	}

	var out []*meshconfig.Object
	for _, k := range order {
		cands, l := byKey[k], live[k]
		var w *meshconfig.Object
		if l != nil {
			liveFile, _ := splitOrigin(l.Origin)
			for _, c := range cands {
				if file, _ := splitOrigin(c.Origin); file == liveFile {
					w = c
					break
				}
			}
			if w == nil && (keepLastGood(l, res.rejections) || hold(l)) {
				w = l
			}
		}
		if w == nil && len(cands) > 0 {
			w = cands[0]
		}
		if w == nil {
			continue
		}
		winner[k] = w
		out = append(out, w)
	}
	for _, o := range res.objects {
		w := winner[keyOf(o)]
		if w == o {
			continue
		}
		which := "the first one in path order"
		if l := live[keyOf(o)]; l != nil && sameFile(l.Origin, w.Origin) {
			which = "the live one"
		}
		file, index := splitOrigin(o.Origin)
		res.rejections = append(res.rejections, meshconfig.Rejection{
			File: file, Index: index, Kind: o.Kind.Kind, Namespace: o.Namespace, Name: o.Name,
			Reason: fmt.Sprintf("duplicate %s %s: %s, at %s, is kept", o.Kind.Kind, o.Key(), which, w.Origin),
		})
	}
	res.objects = out
	sortObjects(res.objects)
	sortRejections(res.rejections)
}

// keepLastGood reports whether the live object o stays because the load
// failed on it, and notes it in the rejection that says why:
//   - an object rejected by name (invalid spec, bad metadata) keeps its
//     previous valid version;
//   - a file, directory or document that failed before any object in it
//     could be named (unreadable, too large, broken YAML, a link not
//     followed) keeps every previous object that came from it.
func keepLastGood(o *meshconfig.Object, rejections []meshconfig.Rejection) bool {
	file, _ := splitOrigin(o.Origin)
	k := keyOf(o)
	for i, r := range rejections {
		var hit bool
		if r.Kind != "" && r.Name != "" {
			hit = meshconfig.Ref{Kind: r.Kind, Namespace: namespaceOr(r.Namespace), Name: r.Name}.String() == k
		} else if r.File != "" {
			hit = file == r.File || strings.HasPrefix(file, r.File+"/")
		}
		if hit {
			if !strings.HasSuffix(r.Reason, keptNote) {
				rejections[i].Reason += keptNote
			}
			return true
		}
	}
	return false
}

func keyOf(o *meshconfig.Object) string { return o.Ref().String() }

func sameFile(origin1, origin2 string) bool {
	f1, _ := splitOrigin(origin1)
	f2, _ := splitOrigin(origin2)
	return f1 == f2
}

func namespaceOr(ns string) string {
	if ns == "" {
		return meshconfig.DefaultNamespace
	}
	return ns
}
