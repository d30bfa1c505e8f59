package gen

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonfaultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
)

// routeConfig builds the routes of one listener (service port). Without a
// VirtualService every request goes to the port's cluster.
func (g *grpcGen) routeConfig(svc *mesh.Service, p mesh.Port, name string) *routev3.RouteConfiguration {
	vh := &routev3.VirtualHost{
		Name:    name,
		Domains: []string{name, svc.Hostname},
	}
	vss := g.snap.VirtualServices[svc.Hostname]
	for _, other := range vss[min(1, len(vss)):] {
		g.problem(mesh.Problem{Resource: other.Ref(), Field: "spec.hosts",
			Reason: fmt.Sprintf("host %s is already routed by %s; this VirtualService is ignored for it", svc.Hostname, vss[0].Ref())})
	}
	if len(vss) > 0 {
		vh.Routes = g.httpRoutes(vss[0], svc, p)
	} else {
		vh.Routes = []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: build.ClusterName(svc.Hostname, p.Number, "")}}},
		}}
	}
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{vh}}
}

func (g *grpcGen) httpRoutes(cfg *mesh.Config, svc *mesh.Service, p mesh.Port) []*routev3.Route {
	if g.routes == nil {
		g.routes = &routeTranslator{
			service: func(host string) *mesh.Service { return g.snap.Services[host] },
			subset: func(host, subset string) bool {
				_, ok := g.snap.Subset(host, subset)
				return ok
			},
			problem: func(resource, field, reason string) {
				g.problem(mesh.Problem{Resource: resource, Field: field, Reason: reason})
			},
		}
	}
	return g.routes.virtualService(cfg, meshContext(p.Number))
}

func hasPort(s *mesh.Service, port uint32) bool {
	_, ok := s.Port(port)
	return ok
}

func redirectCode(code uint32) routev3.RedirectAction_RedirectResponseCode {
	switch code {
	case 302:
		return routev3.RedirectAction_FOUND
	case 303:
		return routev3.RedirectAction_SEE_OTHER
	case 307:
		return routev3.RedirectAction_TEMPORARY_REDIRECT
	case 308:
		return routev3.RedirectAction_PERMANENT_REDIRECT
	default:
		return routev3.RedirectAction_MOVED_PERMANENTLY
	}
}

func routeMatch(m *networking.HTTPMatchRequest) *routev3.RouteMatch {
	rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if m.GetIgnoreUriCase() {
		rm.CaseSensitive = wrapperspb.Bool(false)
	}
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		rm.PathSpecifier = &routev3.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: u.Regex}}
	}
	for _, name := range slices.Sorted(maps.Keys(m.GetHeaders())) {
		rm.Headers = append(rm.Headers, headerMatcher(name, m.GetHeaders()[name], false))
	}
	for _, name := range slices.Sorted(maps.Keys(m.GetWithoutHeaders())) {
		rm.Headers = append(rm.Headers, headerMatcher(name, m.GetWithoutHeaders()[name], true))
	}
	if m.GetMethod() != nil {
		rm.Headers = append(rm.Headers, headerMatcher(":method", m.GetMethod(), false))
	}
	if m.GetAuthority() != nil {
		rm.Headers = append(rm.Headers, headerMatcher(":authority", m.GetAuthority(), false))
	}
	if m.GetScheme() != nil {
		rm.Headers = append(rm.Headers, headerMatcher(":scheme", m.GetScheme(), false))
	}
	for _, name := range slices.Sorted(maps.Keys(m.GetQueryParams())) {
		if sm := stringMatcher(m.GetQueryParams()[name]); sm != nil {
			rm.QueryParameters = append(rm.QueryParameters, &routev3.QueryParameterMatcher{
				Name: name, QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{StringMatch: sm}})
		} else {
			rm.QueryParameters = append(rm.QueryParameters, &routev3.QueryParameterMatcher{
				Name: name, QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}})
		}
	}
	return rm
}

func headerMatcher(name string, sm *networking.StringMatch, invert bool) *routev3.HeaderMatcher {
	hm := &routev3.HeaderMatcher{Name: strings.ToLower(name), InvertMatch: invert}
	if m := stringMatcher(sm); m != nil {
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: m}
	} else {
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
	}
	return hm
}

func stringMatcher(sm *networking.StringMatch) *matcherv3.StringMatcher {
	switch m := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m.Exact}}
	case *networking.StringMatch_Prefix:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: m.Prefix}}
	case *networking.StringMatch_Regex:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: m.Regex}}}
	}
	return nil
}

func fault(f *networking.HTTPFaultInjection) *faultv3.HTTPFault {
	out := &faultv3.HTTPFault{}
	if d := f.GetDelay(); d != nil && d.GetFixedDelay() != nil {
		//lint:ignore SA1019 Istio still honours the deprecated integer percent when percentage is unset
		legacy := d.GetPercent()
		out.Delay = &commonfaultv3.FaultDelay{
			FaultDelaySecifier: &commonfaultv3.FaultDelay_FixedDelay{FixedDelay: d.GetFixedDelay()},
			Percentage:         percent(d.GetPercentage(), legacy),
		}
	}
	if a := f.GetAbort(); a != nil {
		fa := &faultv3.FaultAbort{Percentage: percent(a.GetPercentage(), 0)}
		switch e := a.GetErrorType().(type) {
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			fa.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			fa.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: grpcCode(e.GrpcStatus)}
		}
		if fa.ErrorType != nil {
			out.Abort = fa
		}
	}
	return out
}

// percent converts Istio's percentage (0–100, fractional) to Envoy's,
// with millionths precision. Istio: an unset percentage means 100%.
func percent(p *networking.Percent, legacy int32) *typev3.FractionalPercent {
	v := 100.0
	switch {
	case p != nil:
		v = p.GetValue()
	case legacy != 0:
		v = float64(legacy)
	}
	return &typev3.FractionalPercent{Numerator: uint32(v * 10000), Denominator: typev3.FractionalPercent_MILLION}
}

var grpcCodes = map[string]uint32{
	"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
	"ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9, "ABORTED": 10,
	"OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

func grpcCode(s string) uint32 {
	if c, ok := grpcCodes[strings.ToUpper(s)]; ok {
		return c
	}
	var n uint32
	if _, err := fmt.Sscan(s, &n); err == nil {
		return n
	}
	return 14 // UNAVAILABLE
}
