package resource

import (
	"maps"
	"slices"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/mesh"
)

// New returns the result holding byType (type URL -> name -> resource,
// handed over: not changed afterwards) and problems, with a new ID and no
// history.
func New(byType map[string]map[string]*Prepared, problems []mesh.Problem) *ProxyResources {
	return &ProxyResources{Resources: byType, Problems: problems, id: newResults()}
}

// Combine returns base with the resources of add in place of, or beside,
// base's of the same type and name, and problems added to base's. It has
// no ID (ID 0): a stream that holds it compares sets rather than following
// a history. base is not changed.
func Combine(base *ProxyResources, add map[string][]*Prepared, problems []mesh.Problem) *ProxyResources {
	res := &ProxyResources{Resources: make(map[string]map[string]*Prepared, len(base.Resources)), Problems: base.Problems}
	for t, byName := range base.Resources {
		res.Resources[t] = byName // immutable: shared
	}
	for t, list := range add {
		all := maps.Clone(base.Resources[t])
		if all == nil {
			all = map[string]*Prepared{}
		}
		for _, p := range list {
			all[p.Name] = p
		}
		res.Resources[t] = all
	}
	res.Problems = appendNew(res.Problems, problems)
	return res
}

// Derive returns base with updates' resources in place of base's:
// endpoints by name (base's others kept), every other type updates holds
// wholesale. It records what changed per type (ChangesSince) and derives
// the sorted sets base had already computed. A Prepared equal in content
// to base's keeps base's identity. base is not changed.
func Derive(base *ProxyResources, updates map[string][]*Prepared, problems []mesh.Problem) *ProxyResources {
	return derive(base, updates, func(t string) bool { return t == typeurl.Endpoint }, nil, problems)
}

// DeriveRemoving is Derive where the types updates holds that whole does
// not name are updated by name (base's others kept), after the names gone
// are removed from them.
func DeriveRemoving(base *ProxyResources, updates map[string][]*Prepared, whole []string, gone []string, problems []mesh.Problem) *ProxyResources {
	return derive(base, updates, func(t string) bool { return !slices.Contains(whole, t) }, gone, problems)
}

// derive is Derive and DeriveRemoving: partialType says which types
// updates holds by name.
func derive(base *ProxyResources, updates map[string][]*Prepared, partialType func(typeURL string) bool, gone []string, problems []mesh.Problem) *ProxyResources {
	changes := map[string]*Changes{}
	res := &ProxyResources{Resources: make(map[string]map[string]*Prepared, len(base.Resources)), Problems: base.Problems, id: newResults()}
	if base.id != 0 {
		res.steps = append(make([]step, 0, historyDepth), step{base: base.id, changes: changes})
		res.steps = append(res.steps, base.steps[:min(len(base.steps), historyDepth-1)]...)
	}
	for t, byName := range base.Resources {
		res.Resources[t] = byName // immutable: shared
	}
	for t, list := range updates {
		partial := partialType(t)
		var all map[string]*Prepared
		if partial {
			all = maps.Clone(base.Resources[t])
			if all == nil {
				all = map[string]*Prepared{}
			}
		} else {
			all = make(map[string]*Prepared, len(list))
		}
		ch := &Changes{}
		if partial {
			for _, name := range gone {
				if all[name] != nil {
					delete(all, name)
					ch.Removed = append(ch.Removed, name)
				}
			}
		}
		for _, p := range list {
			if q := base.Resources[t][p.Name]; q != nil && q.Hash == p.Hash {
				p = q // unchanged content keeps its identity
			} else {
				ch.Updated = append(ch.Updated, p)
			}
			all[p.Name] = p
		}
		ch.Removed = slices.DeleteFunc(ch.Removed, func(name string) bool { return all[name] != nil })
		if !partial {
			for name := range base.Resources[t] {
				if all[name] == nil {
					ch.Removed = append(ch.Removed, name)
				}
			}
		}
		slices.SortFunc(ch.Updated, compareNames)
		slices.Sort(ch.Removed)
		changes[t] = ch
		res.Resources[t] = all
	}
	res.Problems = appendNew(res.Problems, problems)
	base.setMu.Lock()
	for t, set := range base.sets {
		if ch := changes[t]; ch == nil || ch.Empty() {
			res.setSet(t, set) // unchanged: shared
		} else if 4*(len(ch.Updated)+len(ch.Removed)) < len(set.Sorted) {
			res.setSet(t, set.apply(ch))
		}
	}
	base.setMu.Unlock()
	return res
}

// appendNew appends to list the problems it does not hold yet.
func appendNew(list, problems []mesh.Problem) []mesh.Problem {
	for _, p := range problems {
		if !slices.Contains(list, p) {
			list = append(list, p)
		}
	}
	return list
}
