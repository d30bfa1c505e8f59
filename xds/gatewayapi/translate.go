// Package gatewayapi translates the Kubernetes Gateway API
// (gateway.networking.k8s.io: GatewayClass, Gateway, HTTPRoute, GRPCRoute,
// TCPRoute, TLSRoute, ReferenceGrant) into the Istio objects the
// generators already read — Gateways for the listeners of a Gateway of
// nave's class, VirtualServices for the routes attached to them and for
// mesh routes (GAMMA: a route whose parent is a Service) — and computes
// the status the API expects of every object, per cluster
// (meshconfigv1.GatewayAPIStatus), which the hub sends each spoke to write
// back. xds/mesh calls it while building a snapshot; it reads only what
// its Input gives (docs/design.md invariant 6: a pure function of the
// snapshot's inputs). See docs/gateway-api.md and
// docs/decisions/042-gateway-api-on-the-hub.md.
package gatewayapi

import (
	"cmp"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// SourceAnnotation marks an Istio object made by the translation; its
// value names the Gateway API object it was made of ("Kind ns/name", the
// first one for a merged object). A generated Gateway selects proxies of
// its own namespace only (Gateway API semantics), where a written one
// selects in every namespace.
const SourceAnnotation = "internal.nave.io/gateway-api-source"

// Definition is one cluster's definition of a Gateway API object. A
// plain value; the object is never modified.
type Definition struct {
	Cluster string
	Object  *meshconfig.Object
	// LostTo names the cluster whose different definition of the same
	// kind, namespace and name won the merge (xds/mesh's conflict rule);
	// empty for the winner and for definitions equal to it.
	LostTo string
}

// Service is what translation needs of a mesh service. A plain value.
type Service struct {
	Namespace string
	Ports     []Port
}

// Port is a service port. A plain value.
type Port struct {
	Number   uint32
	Name     string
	Protocol string
}

// Input is what a translation reads. Its functions must be pure for the
// duration of the call; it is read by the translating goroutine only.
type Input struct {
	// Definitions are every cluster's Gateway API objects, the
	// definitions of one object in merge order (the winner first).
	Definitions []Definition
	// Service returns the mesh's service of hostname host.
	Service func(host string) (Service, bool)
	// DomainSuffix is a cluster's DNS suffix: a Service named in a route
	// of that cluster is NAME.NAMESPACE.svc.SUFFIX.
	DomainSuffix func(cluster string) string
}

// Generated is an Istio object the translation made, with the cluster
// whose object it was made of. A plain value; the object is never
// modified once returned, and may be shared with later translations.
type Generated struct {
	Cluster string
	Object  *meshconfig.Object
}

// Problem is a translation problem: a Gateway API object's field that is
// not applied, and why. A plain value.
type Problem struct {
	Resource string // "cluster:Kind namespace/name"
	Field    string
	Reason   string
}

// Result is a translation's output, the caller's once returned; the
// statuses it holds are never modified, so it may be read from any number
// of goroutines.
type Result struct {
	// Gateways are Istio Gateways, one per valid listener of a Gateway of
	// nave's class, sorted by namespace/name.
	Gateways []Generated
	// VirtualServices are sorted by namespace/name. For a host of the
	// mesh, the consumer routes' VirtualServices (exported to their own
	// namespace only) come before the producer's (MeshOrder).
	VirtualServices []Generated
	// Statuses are the statuses of each cluster's objects, by cluster,
	// sorted by kind, namespace and name.
	Statuses map[string][]*meshconfigv1.GatewayAPIStatus
	// Problems are sorted by resource and field.
	Problems []Problem
}

// Translator translates, remembering between calls what makes the next
// call cheap and stable: each object's decoded spec (objects are never
// modified) and the Istio objects it made, reused when made again equal,
// so that a snapshot's config compares equal by identity when nothing it
// depends on changed. Safe for use by one goroutine at a time.
type Translator struct {
	specs     map[*meshconfig.Object]any
	generated map[genKey]*meshconfig.Object
	// rules are the routes' translated rules, reused while what they
	// depend on is unchanged; grants is the ReferenceGrants they saw.
	rules  map[rulesKey]*rules
	grants string
	// buckets are the VirtualServices made and what of.
	buckets map[bucketKey]*vsMemo
}

type genKey struct{ kind, namespace, name, cluster string }

// Translate translates in (see Result). A nil Translator translates
// without memory.
func (t *Translator) Translate(in Input) *Result {
	if t == nil {
		t = &Translator{}
	}
	tr := &translation{t: t, in: in, nextSpecs: map[*meshconfig.Object]any{}, res: &Result{Statuses: map[string][]*meshconfigv1.GatewayAPIStatus{}},
		nextRules: map[rulesKey]*rules{}, nextBuckets: map[bucketKey]*vsMemo{}}
	tr.run()
	t.specs, t.rules, t.grants = tr.nextSpecs, tr.nextRules, tr.nextGrants
	next := make(map[genKey]*meshconfig.Object, len(tr.res.Gateways)+len(tr.res.VirtualServices))
	final := map[*meshconfig.Object]*meshconfig.Object{} // a made object -> the one kept
	for _, list := range [][]Generated{tr.res.Gateways, tr.res.VirtualServices} {
		for i, g := range list {
			k := genKey{g.Object.Kind.Kind, g.Object.Namespace, g.Object.Name, g.Cluster}
			if prev := t.generated[k]; prev == g.Object {
				// reused as made of the same entries
			} else if prev != nil && proto.Equal(prev.Spec, g.Object.Spec) && sameStrings(prev.Annotations, g.Object.Annotations) {
				list[i].Object = prev
			} else {
				g.Object.Version = g.Object.ComputeVersion()
			}
			next[k] = list[i].Object
			final[g.Object] = list[i].Object
		}
	}
	t.generated = next
	for _, m := range tr.made {
		m.memo.obj = final[m.memo.obj]
		tr.nextBuckets[m.key] = m.memo
	}
	t.buckets = tr.nextBuckets
	return tr.res
}

func sameStrings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// sortGenerated orders generated objects by namespace/name.
func sortGenerated(list []Generated) {
	slices.SortFunc(list, func(a, b Generated) int {
		return cmp.Or(cmp.Compare(a.Object.Namespace, b.Object.Namespace), cmp.Compare(a.Object.Name, b.Object.Name))
	})
}
