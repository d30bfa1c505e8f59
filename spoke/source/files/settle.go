package files

import (
	"fmt"
	"strings"

	"github.com/navemesh/nave/shared/meshconfig"
)

// keptNote is appended to the reason of a rejection whose object (or
// file) keeps its last good version.
const keptNote = "; the last good version is kept"

// removal says what a held change would remove: the whole object, or
// part of it.
type removal int

const (
	withdrawal removal = iota // the object is gone from its file
	shrink                    // its new version lacks something (shrinks)
)

// settle decides, object key by object key, what a load publishes, from
// the load's candidates (every valid object, in path order, duplicates
// included) and the objects live until now (prev). The candidate first in
// path order is the one that counts, so that the same files always give
// the same objects, whatever came before, and a restart changes nothing
// (docs/design.md invariant 8; docs/decisions/035), except:
//
//  1. when it comes from the live object's file and shrinks it, the live
//     object stays while hold says so: the file changed in this round and
//     may be half-written (Source.holdRemoval; docs/decisions/035);
//  2. when the live object's file sorts first but yields it no more, the
//     live object stays as it is when the load failed on it
//     (keepLastGood), so that a broken edit never withdraws config that
//     worked (docs/design.md invariant 3), or while hold says so.
//
// Every other candidate is rejected as a duplicate, naming where the one
// kept is; a duplicate that takes over from a live object of another
// file (a newcomer that sorts first) is reported through takeover. An
// object removed from a file that loads fine is gone, and so are the
// objects of a deleted file: those are edits, not errors.
func settle(prev []*meshconfig.Object, res *loadResult, hold func(live *meshconfig.Object, r removal) bool, takeover func(live, winner *meshconfig.Object)) {
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
		if len(cands) > 0 {
			w = cands[0]
		}
		if l != nil {
			liveFile, _ := splitOrigin(l.Origin)
			switch {
			case w != nil && sameFile(l.Origin, w.Origin):
				if shrinks(l, w) && hold(l, shrink) {
					w = l
				}
			case w != nil && fileBefore(w.Origin, liveFile):
				takeover(l, w)
			case keepLastGood(l, res.rejections) || hold(l, withdrawal):
				w = l
			}
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
		if w == live[keyOf(o)] {
			which = "the live one (its file is broken or settling)"
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

// logTakeover reports a duplicate that displaces the live object of
// another file because its file sorts first: the served config changes
// though the live object's file did not.
func (s *Source) logTakeover(live, winner *meshconfig.Object) {
	s.logger.Warn("duplicate config object takes over: its file sorts before the live one's",
		"kind", live.Kind.Kind, "namespace", live.Namespace, "name", live.Name,
		"kept", winner.Origin, "replaced", live.Origin)
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

// fileBefore reports whether origin's file sorts before file, in the
// order load reads files.
func fileBefore(origin, file string) bool {
	f, _ := splitOrigin(origin)
	return f < file
}

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
