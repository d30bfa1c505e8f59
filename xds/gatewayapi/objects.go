package gatewayapi

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// object is one Gateway API object as merged: the definition translated
// (the winner), the clusters that agree with it and those whose
// different definitions lost.
type object struct {
	def    Definition
	spec   any
	agree  []Definition // the winner included
	losers []Definition
	bad    error // the spec did not decode
}

func (o *object) ref() string { return o.def.Cluster + ":" + o.def.Object.Ref().String() }

func (o *object) key() string { return o.def.Object.Key() }

// translation is one Translate call.
type translation struct {
	t         *Translator
	in        Input
	nextSpecs map[*meshconfig.Object]any
	res       *Result

	classes  map[string]*object   // nave's GatewayClasses by name
	gateways map[string]*gateway  // by namespace/name, nave's class only
	grants   map[string][]*object // ReferenceGrants by namespace
	routes   []*route

	gwBuckets   map[bucketKey]*bucket
	meshBuckets map[bucketKey]*bucket

	nextRules   map[rulesKey]*rules
	nextGrants  string
	nextBuckets map[bucketKey]*vsMemo
	made        []madeVS
}

// spec decodes o's spec, once per object across translations.
func (tr *translation) spec(o *meshconfig.Object) (any, error) {
	if s, ok := tr.t.specs[o]; ok {
		tr.nextSpecs[o] = s
		return s, nil
	}
	s, err := meshconfig.GatewayAPISpec(o)
	if err != nil {
		return nil, err
	}
	tr.nextSpecs[o] = s
	return s, nil
}

func (tr *translation) problem(o *object, field, format string, args ...any) {
	tr.res.Problems = append(tr.res.Problems, Problem{Resource: o.ref(), Field: field, Reason: fmt.Sprintf(format, args...)})
}

// group gathers the definitions into objects, by kind.
func (tr *translation) group() map[string][]*object {
	byKey := map[meshconfig.Ref]*object{}
	byKind := map[string][]*object{}
	for _, d := range tr.in.Definitions {
		if !d.Object.Kind.GatewayAPI {
			continue
		}
		ref := d.Object.Ref()
		o := byKey[ref]
		if o == nil {
			o = &object{def: d}
			o.spec, o.bad = tr.spec(d.Object)
			byKey[ref] = o
			byKind[ref.Kind] = append(byKind[ref.Kind], o)
		}
		if d.LostTo != "" {
			o.losers = append(o.losers, d)
		} else {
			o.agree = append(o.agree, d)
		}
	}
	for _, list := range byKind {
		sort.Slice(list, func(i, j int) bool { return list[i].key() < list[j].key() })
	}
	return byKind
}

func (tr *translation) run() {
	byKind := tr.group()
	tr.classes, tr.gateways, tr.grants = map[string]*object{}, map[string]*gateway{}, map[string][]*object{}
	tr.gwBuckets, tr.meshBuckets = map[bucketKey]*bucket{}, map[bucketKey]*bucket{}
	var grants strings.Builder
	for _, o := range byKind["ReferenceGrant"] {
		if o.bad == nil {
			tr.grants[o.def.Object.Namespace] = append(tr.grants[o.def.Object.Namespace], o)
			grants.WriteString(o.key() + "@" + o.def.Object.Version + ",")
		}
	}
	if grants.String() != tr.t.grants {
		tr.t.rules = nil // a route's rules depend on the grants
	}
	tr.nextGrants = grants.String()
	for _, o := range byKind["GatewayClass"] {
		spec, _ := o.spec.(*gatewayv1.GatewayClassSpec)
		if o.bad != nil || spec == nil || string(spec.ControllerName) != meshconfig.GatewayController {
			continue
		}
		if _, dup := tr.classes[o.def.Object.Name]; !dup {
			tr.classes[o.def.Object.Name] = o
		}
		tr.status(o, &gatewayv1.GatewayClassStatus{Conditions: []metav1.Condition{
			condition(string(gatewayv1.GatewayClassConditionStatusAccepted), true, string(gatewayv1.GatewayClassReasonAccepted), "Handled by "+meshconfig.GatewayController),
		}}, nil)
	}
	for _, o := range byKind["KubernetesGateway"] {
		spec, _ := o.spec.(*gatewayv1.GatewaySpec)
		if o.bad != nil || spec == nil || tr.classes[string(spec.GatewayClassName)] == nil {
			continue // not nave's
		}
		tr.gateways[o.key()] = tr.newGateway(o, spec)
	}
	for _, kind := range []string{"HTTPRoute", "GRPCRoute", "TCPRoute", "TLSRoute"} {
		for _, o := range byKind[kind] {
			if o.bad != nil {
				tr.problem(o, "spec", "%v", o.bad)
				continue
			}
			r := tr.newRoute(o)
			tr.routes = append(tr.routes, r)
			r.attach(tr)
		}
	}
	for _, gw := range tr.gateways {
		tr.emitGateway(gw)
	}
	for _, r := range tr.routes {
		r.emitStatus(tr)
	}
	tr.emitVirtualServices()
	sortGenerated(tr.res.Gateways)
	sortGenerated(tr.res.VirtualServices)
	for c, list := range tr.res.Statuses {
		slices.SortFunc(list, func(a, b *meshconfigv1.GatewayAPIStatus) int {
			return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		tr.res.Statuses[c] = list
	}
	slices.SortFunc(tr.res.Problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Reason, b.Reason))
	})
}

// status records o's status for every cluster that agrees with the
// translated definition; lost, if set, is the status of a losing
// definition (given its cluster and the winner's).
func (tr *translation) status(o *object, st any, lost func(d Definition) any) {
	js, err := json.Marshal(st)
	if err != nil {
		tr.problem(o, "status", "status not encoded: %v", err)
		return
	}
	for _, d := range o.agree {
		tr.addStatus(d, js)
	}
	for _, d := range o.losers {
		var ls any = conflictedStatus(o, d)
		if lost != nil {
			ls = lost(d)
		}
		b, err := json.Marshal(ls)
		if err != nil {
			continue
		}
		tr.addStatus(d, b)
	}
}

func (tr *translation) addStatus(d Definition, js []byte) {
	tr.res.Statuses[d.Cluster] = append(tr.res.Statuses[d.Cluster], &meshconfigv1.GatewayAPIStatus{
		Kind: d.Object.Kind.Kind, Namespace: d.Object.Namespace, Name: d.Object.Name, Version: d.Object.Version, Json: js})
}

// ReasonConflicted is the reason of a definition that lost the merge to
// another cluster's different definition of the same object.
const ReasonConflicted = "Conflicted"

func conflictMessage(o *object, d Definition) string {
	return fmt.Sprintf("defined differently in cluster %s, whose definition the mesh uses (oldest creation time, then cluster name)", d.LostTo)
}

// conflictedStatus is the status of a GatewayClass or Gateway definition
// that lost the merge.
func conflictedStatus(o *object, d Definition) any {
	c := []metav1.Condition{condition("Accepted", false, ReasonConflicted, conflictMessage(o, d))}
	switch o.def.Object.Kind.Kind {
	case "GatewayClass":
		return &gatewayv1.GatewayClassStatus{Conditions: c}
	default:
		return &gatewayv1.GatewayStatus{Conditions: c}
	}
}

// condition is a condition of the given type; observedGeneration and
// lastTransitionTime are the writer's (the spoke's).
func condition(typ string, ok bool, reason, message string) metav1.Condition {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: message}
}

// granted reports whether a ReferenceGrant in toNS lets objects of
// (fromGroup, fromKind) in fromNS refer to (toGroup, toKind) name.
func (tr *translation) granted(fromGroup, fromKind, fromNS, toGroup, toKind, toNS, name string) bool {
	for _, o := range tr.grants[toNS] {
		spec, _ := o.spec.(*gatewayv1.ReferenceGrantSpec)
		from := slices.ContainsFunc(spec.From, func(f gatewayv1.ReferenceGrantFrom) bool {
			return string(f.Group) == fromGroup && string(f.Kind) == fromKind && string(f.Namespace) == fromNS
		})
		to := slices.ContainsFunc(spec.To, func(t gatewayv1.ReferenceGrantTo) bool {
			return string(t.Group) == toGroup && string(t.Kind) == toKind && (t.Name == nil || string(*t.Name) == name)
		})
		if from && to {
			return true
		}
	}
	return false
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
