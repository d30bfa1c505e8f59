package meshconfig

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
)

// EnvoyFilter patch vocabulary, Istio's names.
type (
	applyTo = networkingv1alpha3.EnvoyFilter_ApplyTo
	patchOp = networkingv1alpha3.EnvoyFilter_Patch_Operation
)

// envoyPatchOps lists, per applyTo nave supports, the operations it
// applies. It follows Istio's patchers (pilot/pkg/networking/core/
// envoyfilter): an operation Istio silently ignores for a kind of object
// (REPLACE of a listener, ADD of a route configuration) is refused here
// instead; INSERT_* of a whole listener, filter chain, virtual host or
// cluster is an ADD, as in Istio.
var envoyPatchOps = map[applyTo][]patchOp{
	networkingv1alpha3.EnvoyFilter_LISTENER:            {opMerge, opAdd, opRemove, opInsertBefore, opInsertAfter, opInsertFirst},
	networkingv1alpha3.EnvoyFilter_FILTER_CHAIN:        {opMerge, opAdd, opRemove, opInsertBefore, opInsertAfter, opInsertFirst},
	networkingv1alpha3.EnvoyFilter_NETWORK_FILTER:      {opMerge, opAdd, opRemove, opInsertBefore, opInsertAfter, opInsertFirst, opReplace},
	networkingv1alpha3.EnvoyFilter_HTTP_FILTER:         {opMerge, opAdd, opRemove, opInsertBefore, opInsertAfter, opInsertFirst, opReplace},
	networkingv1alpha3.EnvoyFilter_ROUTE_CONFIGURATION: {opMerge},
	networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST:        {opMerge, opAdd, opRemove, opReplace, opInsertBefore, opInsertAfter, opInsertFirst},
	networkingv1alpha3.EnvoyFilter_HTTP_ROUTE:          {opMerge, opAdd, opRemove, opInsertBefore, opInsertAfter, opInsertFirst},
	networkingv1alpha3.EnvoyFilter_CLUSTER:             {opMerge, opAdd, opRemove, opInsertBefore, opInsertAfter, opInsertFirst},
}

const (
	opMerge        = networkingv1alpha3.EnvoyFilter_Patch_MERGE
	opAdd          = networkingv1alpha3.EnvoyFilter_Patch_ADD
	opRemove       = networkingv1alpha3.EnvoyFilter_Patch_REMOVE
	opInsertBefore = networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE
	opInsertAfter  = networkingv1alpha3.EnvoyFilter_Patch_INSERT_AFTER
	opInsertFirst  = networkingv1alpha3.EnvoyFilter_Patch_INSERT_FIRST
	opReplace      = networkingv1alpha3.EnvoyFilter_Patch_REPLACE
)

// validateEnvoyFilter checks an EnvoyFilter: everything nave does not
// apply (an applyTo, an operation for it, a context, a match field,
// targetRefs, a value that is not a valid Envoy message of the patched
// type) fails it, naming the field: nothing of an EnvoyFilter is ignored.
func validateEnvoyFilter(c *checker, p path, ef *networkingv1alpha3.EnvoyFilter) {
	validateSelector(c, p.field("workloadSelector").field("labels"), ef.GetWorkloadSelector().GetLabels())
	if len(ef.GetTargetRefs()) > 0 {
		c.fail(p.field("targetRefs"), "targetRefs (Gateway API gateways and waypoints) are not supported; select workloads with workloadSelector")
	}
	if len(ef.GetConfigPatches()) == 0 {
		c.fail(p.field("configPatches"), "at least one config patch is required")
	}
	for i, cp := range ef.GetConfigPatches() {
		validateEnvoyConfigPatch(c, p.field("configPatches").index(i), cp)
	}
}

func validateEnvoyConfigPatch(c *checker, p path, cp *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch) {
	at := cp.GetApplyTo()
	ops, ok := envoyPatchOps[at]
	switch {
	case at == networkingv1alpha3.EnvoyFilter_INVALID:
		c.fail(p.field("applyTo"), "applyTo is required")
		return
	case !ok:
		c.fail(p.field("applyTo"), "applyTo %s is not supported (nave patches %s)", at, supportedApplyTo())
		return
	}
	if cp.GetPatch() == nil {
		c.fail(p.field("patch"), "patch is required")
		return
	}
	op := cp.GetPatch().GetOperation()
	switch {
	case op == networkingv1alpha3.EnvoyFilter_Patch_INVALID:
		c.fail(p.field("patch").field("operation"), "operation is required")
		return
	case !slices.Contains(ops, op):
		c.fail(p.field("patch").field("operation"), "operation %s is not supported for applyTo %s (supported: %s)", op, at, opNames(ops))
		return
	}
	if fm := cp.GetPatch().GetFilterClass(); fm != networkingv1alpha3.EnvoyFilter_Patch_UNSPECIFIED {
		c.fail(p.field("patch").field("filterClass"), "filterClass is not supported; place the filter with INSERT_BEFORE/INSERT_AFTER")
	}
	validateEnvoyMatch(c, p.field("match"), at, cp.GetMatch())
	vp := p.field("patch").field("value")
	switch {
	case op == opRemove && cp.GetPatch().GetValue() != nil:
		c.fail(vp, "a REMOVE patch takes no value")
	case op != opRemove && cp.GetPatch().GetValue() == nil:
		c.fail(vp, "a %s patch needs a value", op)
	case op != opRemove:
		if _, err := EnvoyPatchValue(at, op, cp.GetPatch().GetValue()); err != nil {
			c.fail(vp, "%v", err)
		}
	}
}

func validateEnvoyMatch(c *checker, p path, at applyTo, m *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch) {
	switch m.GetContext() {
	case networkingv1alpha3.EnvoyFilter_ANY, networkingv1alpha3.EnvoyFilter_SIDECAR_INBOUND,
		networkingv1alpha3.EnvoyFilter_SIDECAR_OUTBOUND, networkingv1alpha3.EnvoyFilter_GATEWAY:
	default:
		c.fail(p.field("context"), "context %s is not supported (ANY, SIDECAR_INBOUND, SIDECAR_OUTBOUND, GATEWAY)", m.GetContext())
	}
	if pm := m.GetProxy(); pm != nil {
		if len(pm.GetMetadata()) > 0 {
			c.fail(p.field("proxy").field("metadata"), "matching node metadata is not supported; match proxyVersion or select workloads with workloadSelector")
		}
		if v := pm.GetProxyVersion(); v != "" {
			if len(v) > 1024 {
				c.fail(p.field("proxy").field("proxyVersion"), "proxyVersion is longer than 1024 characters")
			} else if _, err := regexp.Compile(v); err != nil {
				c.fail(p.field("proxy").field("proxyVersion"), "proxyVersion is not a regular expression: %v", err)
			}
		}
	}
	switch at {
	case networkingv1alpha3.EnvoyFilter_LISTENER, networkingv1alpha3.EnvoyFilter_FILTER_CHAIN,
		networkingv1alpha3.EnvoyFilter_NETWORK_FILTER, networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
		if m.GetRouteConfiguration() != nil || m.GetCluster() != nil {
			c.fail(p, "applyTo %s takes a listener match", at)
		}
		lm := m.GetListener()
		if lm.GetListenerFilter() != "" {
			c.fail(p.field("listener").field("listenerFilter"), "listener filter matches are not supported (nor is applyTo LISTENER_FILTER)")
		}
		fcm := lm.GetFilterChain()
		fp := p.field("listener").field("filterChain")
		if fcm.GetFilter() != nil {
			if at == networkingv1alpha3.EnvoyFilter_LISTENER || at == networkingv1alpha3.EnvoyFilter_FILTER_CHAIN {
				c.fail(fp.field("filter"), "a filter match has no effect with applyTo %s", at)
			}
			if fcm.GetFilter().GetName() == "" {
				c.fail(fp.field("filter").field("name"), "a filter match needs the filter's name")
			}
			if sf := fcm.GetFilter().GetSubFilter(); sf != nil {
				switch {
				case at != networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
					c.fail(fp.field("filter").field("subFilter"), "a subFilter match is only for applyTo HTTP_FILTER")
				case fcm.GetFilter().GetName() != hcmFilterName:
					c.fail(fp.field("filter").field("name"), "a subFilter match needs filter name %s", hcmFilterName)
				case sf.GetName() == "":
					c.fail(fp.field("filter").field("subFilter").field("name"), "a subFilter match needs the HTTP filter's name")
				}
			}
		}
		if at == networkingv1alpha3.EnvoyFilter_HTTP_FILTER && fcm.GetFilter() != nil && fcm.GetFilter().GetName() != hcmFilterName {
			c.fail(fp.field("filter").field("name"), "HTTP filters live in %s; a match on filter %q never applies", hcmFilterName, fcm.GetFilter().GetName())
		}
	case networkingv1alpha3.EnvoyFilter_ROUTE_CONFIGURATION, networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST, networkingv1alpha3.EnvoyFilter_HTTP_ROUTE:
		if m.GetListener() != nil || m.GetCluster() != nil {
			c.fail(p, "applyTo %s takes a routeConfiguration match", at)
		}
		if at != networkingv1alpha3.EnvoyFilter_HTTP_ROUTE && m.GetRouteConfiguration().GetVhost().GetRoute() != nil {
			c.fail(p.field("routeConfiguration").field("vhost").field("route"), "a route match has no effect with applyTo %s", at)
		}
	case networkingv1alpha3.EnvoyFilter_CLUSTER:
		if m.GetListener() != nil || m.GetRouteConfiguration() != nil {
			c.fail(p, "applyTo CLUSTER takes a cluster match")
		}
	}
}

// hcmFilterName is the HTTP connection manager's filter name.
const hcmFilterName = "envoy.filters.network.http_connection_manager"

// EnvoyPatchValue converts a config patch's value into the Envoy message
// that applyTo patches (a Listener, FilterChain, Filter, HttpFilter,
// RouteConfiguration, VirtualHost, Route or Cluster) strictly: an unknown
// field, or a typed_config whose @type the Envoy protos nave links do not
// define, is an error. A value that is a whole object (every operation but
// MERGE) must also pass the Envoy message's own validation. The result is
// the caller's.
func EnvoyPatchValue(at networkingv1alpha3.EnvoyFilter_ApplyTo, op networkingv1alpha3.EnvoyFilter_Patch_Operation, value *structpb.Struct) (proto.Message, error) {
	var m proto.Message
	switch at {
	case networkingv1alpha3.EnvoyFilter_LISTENER:
		m = &listenerv3.Listener{}
	case networkingv1alpha3.EnvoyFilter_FILTER_CHAIN:
		m = &listenerv3.FilterChain{}
	case networkingv1alpha3.EnvoyFilter_NETWORK_FILTER:
		m = &listenerv3.Filter{}
	case networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
		m = &hcmv3.HttpFilter{}
	case networkingv1alpha3.EnvoyFilter_ROUTE_CONFIGURATION:
		m = &routev3.RouteConfiguration{}
	case networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST:
		m = &routev3.VirtualHost{}
	case networkingv1alpha3.EnvoyFilter_HTTP_ROUTE:
		m = &routev3.Route{}
	case networkingv1alpha3.EnvoyFilter_CLUSTER:
		m = &clusterv3.Cluster{}
	default:
		return nil, fmt.Errorf("applyTo %s is not supported", at)
	}
	js, err := protojson.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("value: %w", err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		reason := err.Error()
		if strings.Contains(reason, "unable to resolve") {
			reason += " (the type is not among the Envoy extensions nave knows: docs/extensions.md lists them)"
		}
		return nil, fmt.Errorf("value is not a valid %s: %s", m.ProtoReflect().Descriptor().FullName(), reason)
	}
	if op != opMerge {
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				return nil, fmt.Errorf("value is not a valid %s: %v", m.ProtoReflect().Descriptor().FullName(), err)
			}
		}
	}
	return m, nil
}

func opNames(ops []patchOp) string {
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = o.String()
	}
	return strings.Join(names, ", ")
}

func supportedApplyTo() string {
	var names []string
	for _, at := range []applyTo{networkingv1alpha3.EnvoyFilter_LISTENER, networkingv1alpha3.EnvoyFilter_FILTER_CHAIN,
		networkingv1alpha3.EnvoyFilter_NETWORK_FILTER, networkingv1alpha3.EnvoyFilter_HTTP_FILTER,
		networkingv1alpha3.EnvoyFilter_ROUTE_CONFIGURATION, networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST,
		networkingv1alpha3.EnvoyFilter_HTTP_ROUTE, networkingv1alpha3.EnvoyFilter_CLUSTER} {
		names = append(names, at.String())
	}
	return strings.Join(names, ", ")
}
