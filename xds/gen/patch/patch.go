// Package patch applies EnvoyFilters to what the Envoy generators built
// for one proxy: it selects the EnvoyFilters of the proxy (its namespace's
// and the root namespace's, by workloadSelector), orders their patches as
// Istio does (priority, root namespace first, creation time, name) and
// applies them, after generation, to listeners (with their filter chains,
// network and HTTP filters and inline route configurations), route
// configurations (virtual hosts, routes) and clusters
// (docs/decisions/040-envoyfilter-and-wasmplugin.md).
//
// Generated messages may be shared between proxies (invariant 6 lets
// generators memoize per snapshot), so a resource is cloned before any
// patch touches it. A patch that fails (a merge of mismatched types, a
// panic) leaves the resource as generated and is reported as a Problem of
// its EnvoyFilter; it never fails the generation.
//
// What applies to a proxy is a function of its key alone: namespace,
// labels (scope.LabelSignature includes every EnvoyFilter's selector),
// type and version (proxy.Key.Version).
package patch

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

type (
	applyTo   = networking.EnvoyFilter_ApplyTo
	operation = networking.EnvoyFilter_Patch_Operation
	context   = networking.EnvoyFilter_PatchContext
)

// Patch is one compiled config patch of an EnvoyFilter. It is read-only
// once compiled (per snapshot) and shared by every proxy it applies to.
type Patch struct {
	filter  *filter
	index   int
	applyTo applyTo
	op      operation
	match   *networking.EnvoyFilter_EnvoyConfigObjectMatch
	value   proto.Message // nil for REMOVE
	version *regexp.Regexp
}

// field names the patch in its EnvoyFilter: spec.configPatches[i].
func (p *Patch) field() string { return fmt.Sprintf("spec.configPatches[%d]", p.index) }

// ctx is the patch's match context (ANY when it has no match).
func (p *Patch) ctx() context { return p.match.GetContext() }

// inContext reports whether the patch applies in context c.
func (p *Patch) inContext(c context) bool {
	return p.ctx() == networking.EnvoyFilter_ANY || p.ctx() == c
}

// clone returns a fresh copy of the patch's value, typed.
func cloneValue[T proto.Message](p *Patch) T { return proto.Clone(p.value).(T) }

// filter is one compiled EnvoyFilter.
type filter struct {
	cfg      *mesh.Config
	ref      string
	selector map[string]string
	patches  []*Patch
	problems []mesh.Problem // patches that could not be compiled
}

type filtersKey struct{}

// compile compiles every EnvoyFilter of s, once per snapshot.
func compile(s *mesh.Snapshot) []*filter {
	return s.Memo(filtersKey{}, func() any {
		out := make([]*filter, 0, len(s.EnvoyFilters))
		for _, c := range s.EnvoyFilters {
			ef, _ := c.Object.Spec.(*networking.EnvoyFilter)
			f := &filter{cfg: c, ref: c.Ref(), selector: ef.GetWorkloadSelector().GetLabels()}
			for i, cp := range ef.GetConfigPatches() {
				p := &Patch{filter: f, index: i, applyTo: cp.GetApplyTo(), op: cp.GetPatch().GetOperation(), match: cp.GetMatch()}
				// As Istio: inserting a whole listener, filter chain, virtual
				// host or cluster is adding it.
				switch p.applyTo {
				case networking.EnvoyFilter_LISTENER, networking.EnvoyFilter_FILTER_CHAIN,
					networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_CLUSTER:
					switch p.op {
					case networking.EnvoyFilter_Patch_INSERT_BEFORE, networking.EnvoyFilter_Patch_INSERT_AFTER, networking.EnvoyFilter_Patch_INSERT_FIRST:
						p.op = networking.EnvoyFilter_Patch_ADD
					}
				}
				var err error
				if p.op != networking.EnvoyFilter_Patch_REMOVE {
					p.value, err = meshconfig.EnvoyPatchValue(p.applyTo, cp.GetPatch().GetOperation(), cp.GetPatch().GetValue())
				}
				if v := cp.GetMatch().GetProxy().GetProxyVersion(); err == nil && v != "" {
					p.version, err = regexp.Compile(v)
				}
				if err != nil {
					// Validation refuses these; a spec that bypassed it is
					// reported, not applied.
					f.problems = append(f.problems, mesh.Problem{Resource: f.ref, Field: p.field(), Reason: err.Error()})
					continue
				}
				f.patches = append(f.patches, p)
			}
			out = append(out, f)
		}
		return out
	}).([]*filter)
}

// UsesVersion reports whether any EnvoyFilter of s matches proxies by
// version: if none does, a proxy's version changes nothing it is sent.
func UsesVersion(s *mesh.Snapshot) bool {
	for _, f := range compile(s) {
		for _, p := range f.patches {
			if p.version != nil {
				return true
			}
		}
	}
	return false
}

// Selectors returns the workload selectors of the EnvoyFilters of s, for
// label signatures.
func Selectors(s *mesh.Snapshot) []map[string]string {
	var out []map[string]string
	for _, f := range compile(s) {
		if len(f.selector) > 0 {
			out = append(out, f.selector)
		}
	}
	return out
}

// Set is the patches that apply to one proxy, in the order they apply,
// with the problems met applying them. A Set belongs to one generation
// (one goroutine).
type Set struct {
	typ      proxy.Type
	by       map[applyTo][]*Patch
	problems *build.Problems
	// failures counts the patches that failed on some resource.
	failures int
}

// For returns the patches that apply to the proxy with key k and labels
// in snapshot s, reporting problems to problems; nil when none applies.
func For(s *mesh.Snapshot, k proxy.Key, labels map[string]string, problems *build.Problems) *Set {
	if len(s.EnvoyFilters) == 0 || (k.Type != proxy.Sidecar && k.Type != proxy.Router) {
		return nil
	}
	root := s.RootNamespace()
	var selected []*filter
	for _, f := range compile(s) {
		ns := f.cfg.Object.Namespace
		if ns != root && ns != k.Namespace {
			continue
		}
		if len(f.selector) > 0 && !mesh.Matches(f.selector, labels) {
			continue
		}
		selected = append(selected, f)
	}
	if len(selected) == 0 {
		return nil
	}
	slices.SortStableFunc(selected, func(a, b *filter) int {
		ea, _ := a.cfg.Object.Spec.(*networking.EnvoyFilter)
		eb, _ := b.cfg.Object.Spec.(*networking.EnvoyFilter)
		if c := cmp.Compare(ea.GetPriority(), eb.GetPriority()); c != 0 {
			return c
		}
		ra, rb := a.cfg.Object.Namespace == root, b.cfg.Object.Namespace == root
		if ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		if c := a.cfg.Object.CreationTime.Compare(b.cfg.Object.CreationTime); c != 0 {
			return c
		}
		return strings.Compare(a.cfg.Object.Name+"."+a.cfg.Object.Namespace, b.cfg.Object.Name+"."+b.cfg.Object.Namespace)
	})
	set := &Set{typ: k.Type, by: map[applyTo][]*Patch{}, problems: problems}
	for _, f := range selected {
		for _, pr := range f.problems {
			problems.Add(pr)
		}
		for _, p := range f.patches {
			if p.version != nil && (k.Version == "" || !p.version.MatchString(k.Version)) {
				continue
			}
			set.by[p.applyTo] = append(set.by[p.applyTo], p)
		}
	}
	return set
}

// Failures is the number of patch applications that failed.
func (s *Set) Failures() int {
	if s == nil {
		return 0
	}
	return s.failures
}

// fail reports that patch p could not be applied to the named resource.
func (s *Set) fail(p *Patch, resource string, format string, args ...any) {
	s.failures++
	s.problems.Add(mesh.Problem{Resource: p.filter.ref, Field: p.field(),
		Reason: fmt.Sprintf("not applied to %s: %s", resource, fmt.Sprintf(format, args...))})
}

// guard runs fn on a copy of r's message (made by clone, nil: a deep
// copy), which fn patches and returns with whether it is kept. If fn
// panics, r is kept as generated and the failure is reported against
// every EnvoyFilter with patches of kinds.
func (s *Set) guard(what string, kinds []applyTo, r build.Resource, clone func(proto.Message) proto.Message,
	fn func(m proto.Message) (proto.Message, bool)) (out build.Resource, keep bool) {
	if clone == nil {
		clone = proto.Clone
	}
	m := clone(r.Message)
	defer func() {
		if e := recover(); e != nil {
			s.failures++
			seen := map[*filter]bool{}
			for _, k := range kinds {
				for _, p := range s.by[k] {
					if !seen[p.filter] {
						seen[p.filter] = true
						s.problems.Add(mesh.Problem{Resource: p.filter.ref, Field: "spec.configPatches",
							Reason: fmt.Sprintf("patching %s %s failed (%v); it is sent as generated", what, r.Name, e)})
					}
				}
			}
			out, keep = r, true
		}
	}()
	patched, keep := fn(m)
	if !keep {
		return build.Resource{}, false
	}
	return build.Resource{Name: r.Name, Message: patched}, true
}

// Apply applies the set's patches to the resources of one type
// generated for its proxy and returns the result (rs itself when no
// patch touches that type). Resources are never modified in place.
func (s *Set) Apply(typeURL string, rs []build.Resource) []build.Resource {
	if s == nil {
		return rs
	}
	switch typeURL {
	case listenerType:
		return s.listeners(rs)
	case routeType:
		return s.routes(rs)
	case clusterType:
		return s.clusters(rs)
	}
	return rs
}
