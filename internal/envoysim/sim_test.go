package envoysim

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Hand-written resources for the rules the simulator must get right on its
// own, each with the Envoy documentation it follows.

func vh(name string, domains ...string) *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: name, Domains: domains}
}

// Envoy route components, VirtualHost.domains: exact, then the longest
// suffix wildcard, then the longest prefix wildcard, then "*".
func TestVirtualHostPrecedence(t *testing.T) {
	rc := &routev3.RouteConfiguration{VirtualHosts: []*routev3.VirtualHost{
		vh("any", "*"), vh("prefix", "foo.*"), vh("short-suffix", "*.com"), vh("suffix", "*.foo.com"), vh("exact", "api.foo.com"),
	}}
	for authority, want := range map[string]string{
		"api.foo.com": "exact", "API.FOO.COM": "exact", "x.foo.com": "suffix", "x.bar.com": "short-suffix",
		"foo.bar": "prefix", "other": "any", "api.foo.com:80": "any",
	} {
		if got := virtualHost(rc, authority); got.GetName() != want {
			t.Errorf("%s: got %s, want %s", authority, got.GetName(), want)
		}
	}
}

func exact(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}

// Envoy route components, HeaderMatcher: an absent header does not match;
// invert_match inverts the result, so an inverted matcher matches a
// missing header.
func TestHeaderMatcher(t *testing.T) {
	m := &routev3.HeaderMatcher{Name: "x-user", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact("beta")}}
	inv := &routev3.HeaderMatcher{Name: "x-user", InvertMatch: true, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact("beta")}}
	method := &routev3.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact("POST")}}
	for _, tc := range []struct {
		m    *routev3.HeaderMatcher
		r    Request
		want bool
	}{
		{m, Request{Headers: map[string]string{"x-user": "beta"}}, true},
		{m, Request{}, false},
		{inv, Request{}, true},
		{inv, Request{Headers: map[string]string{"x-user": "beta"}}, false},
		{method, Request{Method: "POST"}, true},
		{method, Request{Method: "GET"}, false},
	} {
		if got := headerMatches(tc.m, tc.r); got != tc.want {
			t.Errorf("%v on %+v: got %v", tc.m, tc.r, got)
		}
	}
}

// Envoy route components, RouteMatch: prefix is case sensitive by
// default; safe_regex matches the whole path without the query string.
func TestRouteMatch(t *testing.T) {
	prefix := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/api"}}
	folded := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/api"}, CaseSensitive: wrapperspb.Bool(false)}
	regex := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "/a+"}}}
	for _, tc := range []struct {
		m    *routev3.RouteMatch
		path string
		want bool
	}{
		{prefix, "/api/x", true}, {prefix, "/API/x", false}, {folded, "/API/x", true},
		{regex, "/aaa?q=1", true}, {regex, "/aaab", false},
	} {
		if got, _ := routeMatches(tc.m, Request{Path: tc.path}); got != tc.want {
			t.Errorf("%v on %s: got %v", tc.m, tc.path, got)
		}
	}
}

func tcpChain(name, cluster string, m *listenerv3.FilterChainMatch) *listenerv3.FilterChain {
	cfg, _ := anypb.New(&tcpv3.TcpProxy{StatPrefix: name, ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: cluster}})
	return &listenerv3.FilterChain{Name: name, FilterChainMatch: m,
		Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}}}
}

// Envoy listener components, "Filter chain match": an exact server name
// beats a wildcard, a longer wildcard a shorter one; with nothing matching,
// the default filter chain takes the connection.
func TestFilterChainMatch(t *testing.T) {
	l := &listenerv3.Listener{
		Name:    "0.0.0.0_443",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 443}}}},
		FilterChains: []*listenerv3.FilterChain{
			tcpChain("wild", "c-wild", &listenerv3.FilterChainMatch{ServerNames: []string{"*.example.com"}}),
			tcpChain("wilder", "c-wilder", &listenerv3.FilterChainMatch{ServerNames: []string{"*.api.example.com"}}),
			tcpChain("exact", "c-exact", &listenerv3.FilterChainMatch{ServerNames: []string{"pay.api.example.com"}}),
		},
		DefaultFilterChain: tcpChain("default", "c-default", nil),
	}
	s := &Sim{listeners: []*listenerv3.Listener{l}}
	for sni, want := range map[string]string{
		"pay.api.example.com": "exact", "x.api.example.com": "wilder", "www.example.com": "wild", "other.org": "default",
	} {
		r := s.Do(Request{IP: "192.0.2.1", Port: 443, SNI: sni})
		if r.Chain != want {
			t.Errorf("%s: chain %q, want %q (err %v)", sni, r.Chain, want, r.Err)
		}
		if len(r.TCP) != 1 || r.TCP[0].Err == nil {
			t.Errorf("%s: the chain's cluster does not exist, and the result must say so: %+v", sni, r.TCP)
		}
	}
}
