package routes

import (
	"regexp"
	"slices"
	"strings"
	"sync"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// regexErrors memoizes whether a regex compiles: every proxy's generation
// checks the same few regexes again. The result is a pure function of the
// string; the memo is dropped whole when it grows large, so that garbage
// input cannot grow it without bound.
var regexErrors struct {
	sync.Mutex
	m map[string]error
}

func regexError(re string) error {
	regexErrors.Lock()
	err, ok := regexErrors.m[re]
	regexErrors.Unlock()
	if ok {
		return err
	}
	_, err = regexp.Compile(re)
	regexErrors.Lock()
	if regexErrors.m == nil || len(regexErrors.m) > 10000 {
		regexErrors.m = map[string]error{}
	}
	regexErrors.m[re] = err
	regexErrors.Unlock()
	return err
}

// sortedKeys returns m's keys in order, nil (allocating nothing) when
// it has none: most matches have no headers or query parameters.
func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// badRegex returns the field and error of the first regex of m that RE2
// (Go's regexp implements its syntax) does not compile.
func badRegex(m *networking.HTTPMatchRequest) (string, error) {
	check := func(f string, sm *networking.StringMatch) (string, error) {
		if r, ok := sm.GetMatchType().(*networking.StringMatch_Regex); ok {
			if err := regexError(r.Regex); err != nil {
				return f, err
			}
		}
		return "", nil
	}
	if f, err := check("uri.regex", m.GetUri()); err != nil {
		return f, err
	}
	for _, f := range []struct {
		name string
		sm   *networking.StringMatch
	}{{"scheme.regex", m.GetScheme()}, {"method.regex", m.GetMethod()}, {"authority.regex", m.GetAuthority()}} {
		if f, err := check(f.name, f.sm); err != nil {
			return f, err
		}
	}
	for _, group := range []struct {
		name string
		m    map[string]*networking.StringMatch
	}{{"headers", m.GetHeaders()}, {"withoutHeaders", m.GetWithoutHeaders()}, {"queryParams", m.GetQueryParams()}} {
		for _, k := range sortedKeys(group.m) {
			if f, err := check(group.name+"."+k+".regex", group.m[k]); err != nil {
				return f, err
			}
		}
	}
	return "", nil
}

// prefixMatch is a route match on a path prefix in one allocation.
type prefixMatch struct {
	match  routev3.RouteMatch
	prefix routev3.RouteMatch_Prefix
}

// regexMatch is a route match on a path regex in one allocation.
type regexMatch struct {
	match routev3.RouteMatch
	safe  routev3.RouteMatch_SafeRegex
	regex matcherv3.RegexMatcher
}

func routeMatch(m *networking.HTTPMatchRequest) *routev3.RouteMatch {
	var rm *routev3.RouteMatch
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		rm = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: u.Exact}}
	case *networking.StringMatch_Regex:
		rx := &regexMatch{regex: matcherv3.RegexMatcher{Regex: u.Regex}}
		rx.safe.SafeRegex = &rx.regex
		rx.match.PathSpecifier = &rx.safe
		rm = &rx.match
	default: // a prefix, or none: "/"
		pm := &prefixMatch{prefix: routev3.RouteMatch_Prefix{Prefix: "/"}}
		if p, ok := u.(*networking.StringMatch_Prefix); ok {
			pm.prefix.Prefix = p.Prefix
		}
		pm.match.PathSpecifier = &pm.prefix
		rm = &pm.match
	}
	if m.GetIgnoreUriCase() {
		rm.CaseSensitive = wrapperspb.Bool(false)
	}
	for _, name := range sortedKeys(m.GetHeaders()) {
		rm.Headers = append(rm.Headers, headerMatcher(name, m.GetHeaders()[name], false))
	}
	for _, name := range sortedKeys(m.GetWithoutHeaders()) {
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
	for _, name := range sortedKeys(m.GetQueryParams()) {
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
