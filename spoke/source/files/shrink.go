package files

import (
	"maps"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/navemesh/nave/shared/meshconfig"
)

// shrinks reports whether next, a new version of the object old from the
// same file, lacks something old has: a label or annotation, or anything
// of the spec (docs/decisions/035-a-half-written-file-never-shrinks-config.md).
// A file cut at a line boundary only ever loses content, so what a cut
// can do is a shrink, and a shrink waits like a withdrawal; everything
// else (an added field, list entry or map key, a changed value) applies
// at once.
//
// The spec is compared field by field, every kind alike: a field set in
// old must be set in next and contain old's value; a list must be at
// least as long and contain old's entries at the same positions; a map
// must hold old's keys, with values containing old's. A scalar contains
// any other value of its field: changing it is an edit, not a removal.
func shrinks(old, next *meshconfig.Object) bool {
	if !hasKeys(next.Labels, old.Labels) || !hasKeys(next.Annotations, old.Annotations) {
		return true
	}
	if old.Spec == nil || next.Spec == nil {
		return old.Spec != nil
	}
	return !containsMessage(next.Spec.ProtoReflect(), old.Spec.ProtoReflect())
}

func hasKeys(m, of map[string]string) bool {
	for k := range maps.Keys(of) {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// containsMessage reports whether big holds everything small does.
func containsMessage(big, small protoreflect.Message) bool {
	if big.Descriptor().FullName() != small.Descriptor().FullName() {
		return false
	}
	ok := true
	small.Range(func(fd protoreflect.FieldDescriptor, sv protoreflect.Value) bool {
		if !big.Has(fd) {
			ok = false
			return false
		}
		bv := big.Get(fd)
		switch {
		case fd.IsList():
			ok = containsList(fd, bv.List(), sv.List())
		case fd.IsMap():
			ok = containsMap(fd, bv.Map(), sv.Map())
		default:
			ok = containsValue(fd, bv, sv)
		}
		return ok
	})
	if !ok {
		return false
	}
	// Unknown fields count as content too: a cut can drop them.
	return len(big.GetUnknown()) >= len(small.GetUnknown())
}

func containsList(fd protoreflect.FieldDescriptor, big, small protoreflect.List) bool {
	if big.Len() < small.Len() {
		return false
	}
	for i := range small.Len() {
		if !containsValue(fd, big.Get(i), small.Get(i)) {
			return false
		}
	}
	return true
}

func containsMap(fd protoreflect.FieldDescriptor, big, small protoreflect.Map) bool {
	ok := true
	small.Range(func(k protoreflect.MapKey, sv protoreflect.Value) bool {
		if !big.Has(k) {
			ok = false
		} else {
			ok = containsValue(fd.MapValue(), big.Get(k), sv)
		}
		return ok
	})
	return ok
}

// containsValue compares one value of field fd (a list entry, a map
// value, a singular field): messages are compared deeply, scalars not at
// all.
func containsValue(fd protoreflect.FieldDescriptor, big, small protoreflect.Value) bool {
	if fd.Message() == nil {
		return true
	}
	return containsMessage(big.Message(), small.Message())
}
