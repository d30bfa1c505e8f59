package files

import (
	"cmp"
	"slices"

	"github.com/navemesh/nave/shared/meshconfig"
)

// Rejection is one skipped object or file, shown at the spoke's debug
// endpoint. File is relative to the source's directory; Index is the
// 0-based document index in it, or -1 when the whole file was skipped.
// A Rejection is a plain value.
type Rejection struct {
	File      string `json:"file"`
	Index     int    `json:"index"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Field     string `json:"field"`
	Reason    string `json:"reason"`
}

func fromObjectError(e *meshconfig.ObjectError) Rejection {
	return Rejection{
		File:      e.Origin,
		Index:     e.Index,
		Kind:      e.Kind,
		Namespace: e.Namespace,
		Name:      e.Name,
		Field:     e.Field,
		Reason:    e.Reason,
	}
}

func sortRejections(rs []Rejection) {
	slices.SortFunc(rs, func(a, b Rejection) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Index, b.Index),
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name),
		)
	})
}
