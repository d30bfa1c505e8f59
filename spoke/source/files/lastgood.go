package files

import (
	"strings"

	"github.com/navemesh/nave/shared/meshconfig"
)

// keptNote is appended to the reason of a rejection whose object (or
// file) keeps its last good version.
const keptNote = "; the last good version is kept"

// keepLastGood carries objects of the previous load over into res where
// the new load failed on them, so that a broken edit never withdraws
// config that worked (DESIGN.md invariant 3):
//   - an object rejected by name (invalid spec, bad metadata) keeps its
//     previous valid version;
//   - a file, directory or document that failed before any object in it
//     could be named (unreadable, too large, broken YAML) keeps every
//     previous object that came from it and is not in the new load.
//
// An object removed from a file that loads fine is gone, and so are the
// objects of a deleted file: those are edits, not errors.
func keepLastGood(prev []*meshconfig.Object, res *loadResult) {
	if len(prev) == 0 || len(res.rejections) == 0 {
		return
	}
	present := make(map[string]bool, len(res.objects))
	for _, o := range res.objects {
		present[objectKey(o.Kind.Kind, o.Namespace, o.Name)] = true
	}
	byKey := make(map[string]*meshconfig.Object, len(prev))
	for _, o := range prev {
		byKey[objectKey(o.Kind.Kind, o.Namespace, o.Name)] = o
	}
	keep := func(o *meshconfig.Object) bool {
		k := objectKey(o.Kind.Kind, o.Namespace, o.Name)
		if present[k] {
			return false
		}
		present[k] = true
		res.objects = append(res.objects, o)
		return true
	}
	for i, r := range res.rejections {
		kept := false
		if r.Kind != "" && r.Name != "" {
			if o, ok := byKey[objectKey(r.Kind, namespaceOr(r.Namespace), r.Name)]; ok {
				kept = keep(o)
			}
		} else if r.File != "" {
			for _, o := range prev {
				if file, _ := splitOrigin(o.Origin); file == r.File || strings.HasPrefix(file, r.File+"/") {
					kept = keep(o) || kept
				}
			}
		}
		if kept {
			res.rejections[i].Reason += keptNote
		}
	}
	sortObjects(res.objects)
}

func objectKey(kind, namespace, name string) string { return kind + " " + namespace + "/" + name }

func namespaceOr(ns string) string {
	if ns == "" {
		return meshconfig.DefaultNamespace
	}
	return ns
}
