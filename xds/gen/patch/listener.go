package patch

import (
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/proxy"
)

const (
	listenerType = typeurl.Listener
	routeType    = typeurl.Route
	clusterType  = typeurl.Cluster
)

// Names of the virtual listeners, whose ports live in their filter
// chains' matches (Istio's names, as xds/gen/envoy's).
const (
	virtualInbound  = "virtualInbound"
	virtualOutbound = "virtualOutbound"
)

var (
	listenerLevel = []applyTo{networking.EnvoyFilter_LISTENER, networking.EnvoyFilter_FILTER_CHAIN,
		networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_HTTP_FILTER}
	routeLevel = []applyTo{networking.EnvoyFilter_ROUTE_CONFIGURATION, networking.EnvoyFilter_VIRTUAL_HOST,
		networking.EnvoyFilter_HTTP_ROUTE}
)

// listenerContext is the patch context of a listener of the set's proxy:
// GATEWAY for a router, else by the listener's traffic direction.
func (s *Set) listenerContext(l *listenerv3.Listener) context {
	switch {
	case s.typ == proxy.Router:
		return networking.EnvoyFilter_GATEWAY
	case l.GetTrafficDirection() == corev3.TrafficDirection_INBOUND:
		return networking.EnvoyFilter_SIDECAR_INBOUND
	}
	return networking.EnvoyFilter_SIDECAR_OUTBOUND
}

// listeners patches a proxy's listeners: each group of one context (a
// sidecar's inbound and outbound, a gateway's) gets the patches of that
// context, then the listeners ADDed in it; REMOVEd ones are dropped.
func (s *Set) listeners(rs []build.Resource) []build.Resource {
	if !s.any(listenerLevel...) && !s.any(routeLevel...) {
		return rs
	}
	out := make([]build.Resource, 0, len(rs))
	for _, r := range rs {
		l, _ := r.Message.(*listenerv3.Listener)
		ctx := s.listenerContext(l)
		if !s.mayTouchListener(ctx, l) {
			out = append(out, r)
			continue
		}
		if pr, keep := s.guard("listener", slices.Concat(listenerLevel, routeLevel), r, nil, func(m proto.Message) (proto.Message, bool) {
			l := m.(*listenerv3.Listener)
			return l, s.patchListener(ctx, l)
		}); keep {
			out = append(out, pr)
		}
	}
	var contexts []context
	if s.typ == proxy.Router {
		contexts = []context{networking.EnvoyFilter_GATEWAY}
	} else {
		contexts = []context{networking.EnvoyFilter_SIDECAR_INBOUND, networking.EnvoyFilter_SIDECAR_OUTBOUND}
	}
	for _, ctx := range contexts {
		for _, p := range s.by[networking.EnvoyFilter_LISTENER] {
			if p.op != networking.EnvoyFilter_Patch_ADD || !p.inContext(ctx) {
				continue
			}
			// As Istio: an ADD with no context adds to the outbound side and
			// to gateways only.
			if p.ctx() == networking.EnvoyFilter_ANY && ctx == networking.EnvoyFilter_SIDECAR_INBOUND {
				continue
			}
			l := cloneValue[*listenerv3.Listener](p)
			if slices.ContainsFunc(out, func(r build.Resource) bool { return r.Name == l.GetName() }) {
				s.fail(p, "listeners", "a listener named %q exists already", l.GetName())
				continue
			}
			out = append(out, build.Resource{Name: l.GetName(), Message: l})
		}
	}
	build.SortByName(out)
	return out
}

// any reports whether the set has patches of any of kinds.
func (s *Set) any(kinds ...applyTo) bool {
	for _, k := range kinds {
		if len(s.by[k]) > 0 {
			return true
		}
	}
	return false
}

// mayTouchListener reports whether any patch may change l: one of its
// context whose listener match l passes (or a route patch, for inline
// route configurations).
func (s *Set) mayTouchListener(ctx context, l *listenerv3.Listener) bool {
	for _, k := range listenerLevel {
		for _, p := range s.by[k] {
			if p.inContext(ctx) && listenerMatch(p, l) {
				return true
			}
		}
	}
	if ctx != networking.EnvoyFilter_SIDECAR_INBOUND {
		return false // inline route configurations are a sidecar's inbound ones only
	}
	for _, k := range routeLevel {
		for _, p := range s.by[k] {
			if p.inContext(ctx) {
				return true
			}
		}
	}
	return false
}

// patchListener applies the listener-level patches to l (a copy),
// reporting whether it is kept (false: REMOVEd).
func (s *Set) patchListener(ctx context, l *listenerv3.Listener) bool {
	for _, p := range s.by[networking.EnvoyFilter_LISTENER] {
		if !p.inContext(ctx) || !listenerMatch(p, l) {
			continue
		}
		switch p.op {
		case networking.EnvoyFilter_Patch_REMOVE:
			return false
		case networking.EnvoyFilter_Patch_MERGE:
			merge(l, p.value)
		}
	}
	chains := func(fcs []*listenerv3.FilterChain) []*listenerv3.FilterChain {
		return slices.DeleteFunc(fcs, func(fc *listenerv3.FilterChain) bool {
			return !s.patchFilterChain(ctx, l, fc)
		})
	}
	l.FilterChains = chains(l.FilterChains)
	if l.DefaultFilterChain != nil && len(chains([]*listenerv3.FilterChain{l.DefaultFilterChain})) == 0 {
		l.DefaultFilterChain = nil
	}
	for _, p := range s.by[networking.EnvoyFilter_FILTER_CHAIN] {
		if p.op == networking.EnvoyFilter_Patch_ADD && p.inContext(ctx) && listenerMatch(p, l) {
			l.FilterChains = append(l.FilterChains, cloneValue[*listenerv3.FilterChain](p))
		}
	}
	return true
}

// patchFilterChain applies the filter-chain-level patches to fc,
// reporting whether it is kept.
func (s *Set) patchFilterChain(ctx context, l *listenerv3.Listener, fc *listenerv3.FilterChain) bool {
	for _, p := range s.by[networking.EnvoyFilter_FILTER_CHAIN] {
		if !p.inContext(ctx) || !listenerMatch(p, l) || !filterChainMatch(p, l, fc) {
			continue
		}
		switch p.op {
		case networking.EnvoyFilter_Patch_REMOVE:
			return false
		case networking.EnvoyFilter_Patch_MERGE:
			v := p.value.(*listenerv3.FilterChain)
			if ts := v.GetTransportSocket(); ts != nil {
				merged, err := mergeTransportSocket(fc.GetTransportSocket(), ts)
				if err != nil {
					s.fail(p, "filter chain "+fc.GetName(), "%v", err)
					continue
				}
				fc.TransportSocket = merged
				v = proto.Clone(v).(*listenerv3.FilterChain)
				v.TransportSocket = nil
			}
			merge(fc, v)
		}
	}
	fc.Filters = s.patchNetworkFilters(ctx, l, fc, fc.Filters)
	return true
}

func (s *Set) patchNetworkFilters(ctx context, l *listenerv3.Listener, fc *listenerv3.FilterChain, fs []*listenerv3.Filter) []*listenerv3.Filter {
	for _, p := range s.by[networking.EnvoyFilter_NETWORK_FILTER] {
		if !p.inContext(ctx) || !listenerMatch(p, l) || !filterChainMatch(p, l, fc) {
			continue
		}
		name := p.match.GetListener().GetFilterChain().GetFilter().GetName()
		fs = applyListOp(p, fs, func(f *listenerv3.Filter) bool { return name == "" || f.GetName() == name },
			name != "", func() *listenerv3.Filter { return cloneValue[*listenerv3.Filter](p) })
	}
	for _, f := range fs {
		for _, p := range s.by[networking.EnvoyFilter_NETWORK_FILTER] {
			name := p.match.GetListener().GetFilterChain().GetFilter().GetName()
			if p.op != networking.EnvoyFilter_Patch_MERGE || !p.inContext(ctx) || !listenerMatch(p, l) ||
				!filterChainMatch(p, l, fc) || (name != "" && f.GetName() != name) {
				continue
			}
			v := p.value.(*listenerv3.Filter)
			if v.GetName() != "" {
				f.Name = v.GetName()
			}
			if tc := v.GetTypedConfig(); tc != nil {
				merged, err := mergeAny(f.GetTypedConfig(), tc)
				if err != nil {
					s.fail(p, "network filter "+f.GetName(), "%v", err)
					continue
				}
				f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: merged}
			}
		}
		if f.GetName() == build.HTTPConnectionManagerFilter {
			s.patchHCM(ctx, l, fc, f)
		}
	}
	return fs
}

// patchHCM applies the HTTP filter patches, and the route patches to an
// inline route configuration, to an HTTP connection manager filter.
func (s *Set) patchHCM(ctx context, l *listenerv3.Listener, fc *listenerv3.FilterChain, f *listenerv3.Filter) {
	var filterPatches []*Patch
	for _, p := range s.by[networking.EnvoyFilter_HTTP_FILTER] {
		if p.inContext(ctx) && listenerMatch(p, l) && filterChainMatch(p, l, fc) && networkFilterMatch(p, f) {
			filterPatches = append(filterPatches, p)
		}
	}
	// xds/gen/envoy inlines the route configurations of a sidecar's
	// inbound listener only; the others are RDS (patched as routes).
	inlineRoutes := ctx == networking.EnvoyFilter_SIDECAR_INBOUND && s.any(routeLevel...)
	if len(filterPatches) == 0 && !inlineRoutes {
		return
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
		return // not an HCM of this Envoy API: nothing of ours
	}
	changed := false
	if rc := hcm.GetRouteConfig(); rc != nil && inlineRoutes {
		changed = s.patchRouteConfiguration(ctx, rc) || changed
	}
	for _, p := range filterPatches {
		sub := p.match.GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName()
		hcm.HttpFilters = applyListOp(p, hcm.HttpFilters, func(h *hcmv3.HttpFilter) bool { return sub == "" || h.GetName() == sub },
			sub != "", func() *hcmv3.HttpFilter { return cloneValue[*hcmv3.HttpFilter](p) })
		changed = true
	}
	for _, h := range hcm.HttpFilters {
		for _, p := range filterPatches {
			sub := p.match.GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName()
			if p.op != networking.EnvoyFilter_Patch_MERGE || (sub != "" && h.GetName() != sub) {
				continue
			}
			v := p.value.(*hcmv3.HttpFilter)
			if v.GetName() != "" {
				h.Name = v.GetName()
			}
			if tc := v.GetTypedConfig(); tc != nil {
				merged, err := mergeAny(h.GetTypedConfig(), tc)
				if err != nil {
					s.fail(p, "HTTP filter "+h.GetName(), "%v", err)
					continue
				}
				h.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: merged}
			}
		}
	}
	if changed {
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: build.Any(hcm)}
	}
}

// applyListOp applies a list operation (ADD, INSERT_*, REPLACE, REMOVE)
// of p to list, whose elements matches selects; named says whether the
// patch names an element (without one, INSERT_BEFORE is INSERT_FIRST and
// INSERT_AFTER is ADD, and REPLACE and REMOVE do nothing, as in Istio).
// MERGE is applied by the caller.
func applyListOp[E any](p *Patch, list []E, matches func(E) bool, named bool, value func() E) []E {
	switch p.op {
	case networking.EnvoyFilter_Patch_ADD:
		return append(list, value())
	case networking.EnvoyFilter_Patch_INSERT_FIRST:
		return slices.Insert(list, 0, value())
	case networking.EnvoyFilter_Patch_INSERT_BEFORE, networking.EnvoyFilter_Patch_INSERT_AFTER:
		after := p.op == networking.EnvoyFilter_Patch_INSERT_AFTER
		if !named {
			if after {
				return append(list, value())
			}
			return slices.Insert(list, 0, value())
		}
		if i := slices.IndexFunc(list, matches); i >= 0 {
			if after {
				i++
			}
			return slices.Insert(list, i, value())
		}
	case networking.EnvoyFilter_Patch_REPLACE:
		if i := slices.IndexFunc(list, matches); named && i >= 0 {
			list[i] = value()
		}
	case networking.EnvoyFilter_Patch_REMOVE:
		if named {
			return slices.DeleteFunc(list, matches)
		}
	}
	return list
}

// listenerMatch: the listener's name and port (a virtual listener's port
// is matched on its filter chains, except by LISTENER patches).
func listenerMatch(p *Patch, l *listenerv3.Listener) bool {
	m := p.match.GetListener()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != l.GetName() {
		return false
	}
	if p.applyTo != networking.EnvoyFilter_LISTENER && isVirtual(l) {
		return true
	}
	return m.GetPortNumber() == 0 || l.GetAddress().GetSocketAddress().GetPortValue() == m.GetPortNumber()
}

func isVirtual(l *listenerv3.Listener) bool {
	return l.GetName() == virtualInbound || l.GetName() == virtualOutbound
}

// filterChainMatch: on a virtual listener the port is the chain's
// destination port; then the chain's name, SNI, transport protocol,
// application protocols and destination port.
func filterChainMatch(p *Patch, l *listenerv3.Listener, fc *listenerv3.FilterChain) bool {
	lm := p.match.GetListener()
	if lm == nil {
		return true
	}
	fcm := fc.GetFilterChainMatch()
	if isVirtual(l) && lm.GetPortNumber() > 0 && fcm.GetDestinationPort().GetValue() != lm.GetPortNumber() {
		return false
	}
	m := lm.GetFilterChain()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != fc.GetName() {
		return false
	}
	if m.GetSni() != "" && !slices.Contains(fcm.GetServerNames(), m.GetSni()) {
		return false
	}
	if m.GetTransportProtocol() != "" && fcm.GetTransportProtocol() != m.GetTransportProtocol() {
		return false
	}
	if m.GetApplicationProtocols() != "" {
		for _, ap := range strings.Split(m.GetApplicationProtocols(), ",") {
			if !slices.Contains(fcm.GetApplicationProtocols(), ap) {
				return false
			}
		}
	}
	return m.GetDestinationPort() == 0 || fcm.GetDestinationPort().GetValue() == m.GetDestinationPort()
}

// networkFilterMatch: the network filter's name, when the patch names one.
func networkFilterMatch(p *Patch, f *listenerv3.Filter) bool {
	name := p.match.GetListener().GetFilterChain().GetFilter().GetName()
	return name == "" || name == f.GetName()
}
