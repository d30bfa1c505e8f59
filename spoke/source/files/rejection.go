package files

import (
	"cmp"
	"slices"

	"github.com/navemesh/nave/shared/meshconfig"
)

func sortRejections(rs []meshconfig.Rejection) {
	slices.SortFunc(rs, func(a, b meshconfig.Rejection) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Index, b.Index),
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name),
		)
	})
}
