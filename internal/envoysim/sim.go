// Package envoysim walks a proxy's xDS resources the way Envoy would for one
// request, so tests can assert what generated config does without an
// Envoy binary: which listener and filter chain take a connection, which
// route configuration, virtual host and route take a request, what the
// route does (clusters and weights, redirect, direct response, timeout,
// retries, fault, mirrors, header changes), and which endpoints the chosen
// clusters hold, by priority and locality.
//
// It also applies inbound security: filter chain selection by transport
// protocol and ALPN (tls_inspector) or, on listeners with the
// http_inspector, by the HTTP it detects in plain text (a request with a
// Method is HTTP/1.1, or h2c with H2C), the TLS handshake of a chain's
// DownstreamTlsContext (client certificate required, SAN matchers), the
// RBAC filters (network and HTTP: allow, deny, log, shadow rules into the
// dynamic metadata), ext_authz (whether the external authorizer is asked;
// its answer is the request's) and jwt_authn; and it
// reports which transport socket an upstream endpoint gets (transport
// socket matches) and which server certificates it accepts
// (Endpoint.AcceptsServer). RetriesOf reads a route's retry policy: the
// hosts retries go to and the back-off between them.
//
// It follows Envoy's documented matching semantics (cited where they are
// subtle). It does not simulate the network, load balancing choices,
// randomness (a runtime fraction is reported as a probability),
// cryptography (a certificate is its URI SAN, a token its claims and key
// id), or HTTP filters other than those above and reading the fault and
// CORS filters' per-route config.
package envoysim

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/envoy"
)

// Sim holds one proxy's resources by name. It is read-only once made:
// Do may be called from any number of goroutines.
type Sim struct {
	listeners []*listenerv3.Listener
	routes    map[string]*routev3.RouteConfiguration
	clusters  map[string]*clusterv3.Cluster
	endpoints map[string]*endpointv3.ClusterLoadAssignment
}

// New indexes resources by type URL, as build.Output holds them.
func New(resources map[string][]build.Resource) *Sim {
	s := &Sim{
		routes:    map[string]*routev3.RouteConfiguration{},
		clusters:  map[string]*clusterv3.Cluster{},
		endpoints: map[string]*endpointv3.ClusterLoadAssignment{},
	}
	for _, r := range resources[typeurl.Listener] {
		if l, ok := r.Message.(*listenerv3.Listener); ok {
			s.listeners = append(s.listeners, l)
		}
	}
	for _, r := range resources[typeurl.Route] {
		if rc, ok := r.Message.(*routev3.RouteConfiguration); ok {
			s.routes[rc.GetName()] = rc
		}
	}
	for _, r := range resources[typeurl.Cluster] {
		if c, ok := r.Message.(*clusterv3.Cluster); ok {
			s.clusters[c.GetName()] = c
		}
	}
	for _, r := range resources[typeurl.Endpoint] {
		if la, ok := r.Message.(*endpointv3.ClusterLoadAssignment); ok {
			s.endpoints[la.GetClusterName()] = la
		}
	}
	return s
}

// Request is one connection and, for HTTP, one request on it. It is a
// plain value.
type Request struct {
	// IP and Port are the original destination the application dialed (a
	// sidecar's outbound traffic), or the destination on the workload
	// (Inbound).
	IP   string
	Port uint32
	// Inbound sends the connection to the sidecar's virtualInbound listener.
	Inbound bool
	// ListenerPort, for gateways, is the port the connection arrives on.
	ListenerPort uint32
	// SNI, when set, makes the transport "tls".
	SNI string
	// TLS makes the transport "tls" without an SNI; ALPN lists the
	// application protocols the client offers; PeerCert is the URI SAN of
	// the client certificate it presents (empty: none; set: TLS).
	TLS      bool
	ALPN     []string
	PeerCert string
	// H2C makes plain-text HTTP prior-knowledge HTTP/2 (what
	// http_inspector reports as "h2c"; otherwise "http/1.1").
	H2C bool
	// SourceIP is the downstream address (RBAC ipBlocks, source.ip).
	SourceIP string
	// JWT is a token the request carries (jwt_authn).
	JWT *Token
	// ExtAuthzDenies is the external authorizer's answer when an
	// ext_authz filter asks it: deny (else allow).
	ExtAuthzDenies bool
	// HTTP fields.
	Authority string
	Path      string // with the query string
	Method    string
	Scheme    string
	Headers   map[string]string // lower-case names
}

// Result is what the proxy does with a Request. It is a plain value,
// owned by the caller once returned.
type Result struct {
	Listener string
	Chain    string // the filter chain's name, "default" for the default chain
	// TCP is set when the chain proxies TCP (tcp_proxy).
	TCP []Destination

	RouteConfig string
	VirtualHost string
	// VirtualHostConfig is the selected virtual host (require_tls, ...).
	VirtualHostConfig *routev3.VirtualHost
	Route             *routev3.Route // the matched route; nil when none matched
	RouteIndex        int
	// MatchProbability is below 1 when the route matched only with a
	// runtime fraction.
	MatchProbability float64

	Clusters       []Destination // the route's cluster(s)
	Redirect       *routev3.RedirectAction
	DirectResponse *routev3.DirectResponseAction
	// Timeout is the route's timeout; nil means Envoy's default (15s).
	Timeout *time.Duration
	Retry   *routev3.RetryPolicy
	Fault   *faultv3.HTTPFault
	CORS    *corsv3.CorsPolicy
	Mirrors []*routev3.RouteAction_RequestMirrorPolicy
	Hash    []*routev3.RouteAction_HashPolicy

	// TLSTerminated is set when the chain terminated TLS; Peer is then
	// the client certificate's identity.
	TLSTerminated bool
	Peer          string
	// Denied says why the proxy refused the connection or request: a
	// failed TLS handshake, an RBAC filter. Empty when it passed.
	Denied string
	// Allowed and Audited list the RBAC policies that matched in ALLOW
	// and LOG filters.
	Allowed, Audited []string
	// ExtAuthz lists the clusters of the external authorizers asked
	// (ext_authz filters enabled for the request).
	ExtAuthz []string
	// Metadata is the request's dynamic metadata, by filter name (what
	// jwt_authn writes).
	Metadata map[string]map[string]any

	// Telemetry is what the filter that handled the request (the HTTP
	// connection manager or tcp_proxy) reports through.
	Telemetry Telemetry

	// Err says why the request could not be followed (no listener, an
	// unknown route configuration, no virtual host, no route, ...).
	Err error
}

// Destination is a cluster a request or connection goes to. It is a
// plain value.
type Destination struct {
	Name    string
	Weight  uint32
	Cluster *clusterv3.Cluster // nil when it does not exist (see Err)
	// Endpoints of the cluster, sorted by priority, locality, address.
	Endpoints []Endpoint
	Err       error
}

// Endpoint is one endpoint of a cluster. It is a plain value.
type Endpoint struct {
	Address  string
	Port     uint32
	Priority uint32
	Locality string // region/zone/subzone
	// LocalityWeight and Weight are the load balancing weights.
	LocalityWeight uint32
	Weight         uint32
	Health         corev3.HealthStatus
	// TransportSocket is how the proxy connects to the endpoint: the
	// first of the cluster's transport_socket_matches whose match the
	// endpoint's metadata (envoy.transport_socket_match) satisfies, else
	// the cluster's transport_socket; nil means plain text.
	TransportSocket *corev3.TransportSocket
}

// UpstreamTLS returns the TLS the proxy originates to the endpoint, or
// nil for plain text.
func (e Endpoint) UpstreamTLS() (*tlsv3.UpstreamTlsContext, error) {
	ts := e.TransportSocket
	if ts == nil {
		return nil, nil
	}
	ctx := new(tlsv3.UpstreamTlsContext)
	if !ts.GetTypedConfig().MessageIs(ctx) {
		return nil, nil // raw_buffer and other sockets: no TLS
	}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return nil, err
	}
	return ctx, nil
}

// AcceptsServer reports whether the proxy, originating TLS to the
// endpoint, accepts a server certificate (signed by a trusted CA) whose
// one subject alt name is san: a URI when it has a scheme, an IP
// address, else a DNS name. Envoy accepts any such certificate when the
// validation context has no SAN matchers, else one that some matcher of
// its SAN type matches (match_typed_subject_alt_names). Plain text is an
// error.
func (e Endpoint) AcceptsServer(san string) (bool, error) {
	ctx, err := e.UpstreamTLS()
	if err != nil {
		return false, err
	}
	if ctx == nil {
		return false, fmt.Errorf("endpoint %s: plain text, no server certificate", e.Address)
	}
	var vc *tlsv3.CertificateValidationContext
	switch v := ctx.GetCommonTlsContext().GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		vc = v.CombinedValidationContext.GetDefaultValidationContext()
	case *tlsv3.CommonTlsContext_ValidationContext:
		vc = v.ValidationContext
	case nil:
		return true, nil // no verification at all
	default:
		return false, fmt.Errorf("endpoint %s: validation context %T is not modelled", e.Address, v)
	}
	sans := vc.GetMatchTypedSubjectAltNames()
	if len(sans) == 0 {
		return true, nil
	}
	typ := tlsv3.SubjectAltNameMatcher_DNS
	if strings.Contains(san, "://") {
		typ = tlsv3.SubjectAltNameMatcher_URI
	} else if _, err := netip.ParseAddr(san); err == nil {
		typ = tlsv3.SubjectAltNameMatcher_IP_ADDRESS
	}
	return slices.ContainsFunc(sans, func(m *tlsv3.SubjectAltNameMatcher) bool {
		return m.GetSanType() == typ && stringMatches(m.GetMatcher(), san)
	}), nil
}

// transportSocketFor applies Envoy's transport socket matching (cluster
// transport_socket_matches against endpoint metadata under
// envoy.transport_socket_match: every field of a match must be equal).
func transportSocketFor(c *clusterv3.Cluster, md *corev3.Metadata) *corev3.TransportSocket {
	have := md.GetFilterMetadata()["envoy.transport_socket_match"].GetFields()
	for _, m := range c.GetTransportSocketMatches() {
		ok := true
		for k, v := range m.GetMatch().GetFields() {
			if hv, found := have[k]; !found || !proto.Equal(hv, v) {
				ok = false
			}
		}
		if ok {
			return m.GetTransportSocket()
		}
	}
	return c.GetTransportSocket()
}

// Do follows r through the proxy.
func (s *Sim) Do(r Request) Result {
	var res Result
	l := s.listenerFor(r)
	if l == nil {
		res.Err = fmt.Errorf("no listener takes %s:%d (listener port %d)", r.IP, r.Port, r.ListenerPort)
		return res
	}
	res.Listener = l.GetName()
	fc, name := chainFor(l, r)
	if fc == nil {
		res.Err = fmt.Errorf("listener %s: no filter chain matches and there is no default", l.GetName())
		return res
	}
	res.Chain = name
	if ts := fc.GetTransportSocket(); ts != nil && !handshake(ts, r, &res) {
		return res
	}
	for _, f := range fc.GetFilters() {
		res.Telemetry.NetworkFilters = append(res.Telemetry.NetworkFilters, f.GetName())
		if handled, ok := networkRBAC(f.GetTypedConfig(), r, &res); handled {
			if !ok {
				return res
			}
			continue
		}
		if handled, ok := extAuthz(f.GetTypedConfig(), r, &res); handled {
			if !ok {
				return res
			}
			continue
		}
		tcp := new(tcpv3.TcpProxy)
		if f.GetTypedConfig().MessageIs(tcp) {
			if err := f.GetTypedConfig().UnmarshalTo(tcp); err != nil {
				res.Err = err
				return res
			}
			res.Telemetry.AccessLogs = tcp.GetAccessLog()
			if c := tcp.GetCluster(); c != "" {
				res.TCP = []Destination{s.destination(c, 1, r)}
			}
			for _, wc := range tcp.GetWeightedClusters().GetClusters() {
				res.TCP = append(res.TCP, s.destination(wc.GetName(), wc.GetWeight(), r))
			}
			return res
		}
		hcm := new(hcmv3.HttpConnectionManager)
		if f.GetTypedConfig().MessageIs(hcm) {
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				res.Err = err
				return res
			}
			res.Telemetry.AccessLogs, res.Telemetry.Tracing = hcm.GetAccessLog(), hcm.GetTracing()
			res.Telemetry.HTTPFilterConfigs = map[string]*anypb.Any{}
			for _, hf := range hcm.GetHttpFilters() {
				res.Telemetry.HTTPFilters = append(res.Telemetry.HTTPFilters, hf.GetName())
				res.Telemetry.HTTPFilterConfigs[hf.GetName()] = hf.GetTypedConfig()
			}
			s.http(hcm, r, &res)
			return res
		}
	}
	res.Err = fmt.Errorf("listener %s chain %s has neither tcp_proxy nor an HTTP connection manager", res.Listener, res.Chain)
	return res
}

// listenerFor picks the listener: for sidecar outbound traffic, the
// virtual outbound listener (use_original_dst) hands the connection to the
// listener whose address is exactly the original destination, else the
// 0.0.0.0 listener of the port, else keeps it (Envoy: listener
// "use_original_dst" and the original_dst listener filter).
func (s *Sim) listenerFor(r Request) *listenerv3.Listener {
	find := func(ip string, port uint32) *listenerv3.Listener {
		for _, l := range s.listeners {
			sa := l.GetAddress().GetSocketAddress()
			if sa.GetAddress() == ip && sa.GetPortValue() == port {
				return l
			}
		}
		return nil
	}
	byName := func(name string) *listenerv3.Listener {
		for _, l := range s.listeners {
			if l.GetName() == name {
				return l
			}
		}
		return nil
	}
	switch {
	case r.Inbound:
		return byName(envoy.VirtualInboundListener)
	case r.ListenerPort != 0:
		return find("0.0.0.0", r.ListenerPort)
	}
	if l := find(r.IP, r.Port); l != nil {
		return l
	}
	if l := find("0.0.0.0", r.Port); l != nil {
		return l
	}
	return byName(envoy.VirtualOutboundListener)
}

// chainFor applies Envoy's filter chain match: criteria in order
// (destination port, destination IP ranges, server names, transport
// protocol, application protocols); at each step the chains whose
// criterion matches most specifically are kept, else those that leave it
// empty; with none left, the default filter chain applies (Envoy:
// listener components, "Filter chain match").
func chainFor(l *listenerv3.Listener, r Request) (*listenerv3.FilterChain, string) {
	cands := l.GetFilterChains()
	// Only listener filters detect the transport and application
	// protocols: without tls_inspector a TLS connection is raw_buffer
	// with no ALPN, as Envoy sees it.
	has := func(name string) bool {
		return slices.ContainsFunc(l.GetListenerFilters(), func(f *listenerv3.ListenerFilter) bool { return f.GetName() == name })
	}
	transport, alpn := "raw_buffer", []string(nil)
	if has(envoy.TLSInspectorFilter) {
		transport, alpn = r.transport(), r.ALPN
	}
	if transport == "raw_buffer" && has(envoy.HTTPInspectorFilter) {
		// http_inspector: plain-text HTTP becomes an application
		// protocol (TLS bytes are not HTTP).
		alpn = nil
		switch {
		case r.transport() == "tls":
		case r.Method != "" && r.H2C:
			alpn = []string{"h2c"}
		case r.Method != "":
			alpn = []string{"http/1.1"}
		}
	}
	ip, _ := netip.ParseAddr(r.IP)
	steps := []func(*listenerv3.FilterChainMatch) (set bool, score int){
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			if m.GetDestinationPort() == nil {
				return false, 0
			}
			return true, boolScore(m.GetDestinationPort().GetValue() == r.Port)
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			if len(m.GetPrefixRanges()) == 0 {
				return false, 0
			}
			best := -1
			for _, pr := range m.GetPrefixRanges() {
				p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", pr.GetAddressPrefix(), pr.GetPrefixLen().GetValue()))
				if err == nil && ip.IsValid() && p.Contains(ip) && p.Bits() > best {
					best = p.Bits()
				}
			}
			return true, best
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			if len(m.GetServerNames()) == 0 {
				return false, 0
			}
			best := -1
			for _, n := range m.GetServerNames() {
				switch {
				case n == r.SNI:
					best = max(best, 1<<20) // exact beats any wildcard
				case strings.HasPrefix(n, "*.") && strings.HasSuffix(r.SNI, n[1:]):
					best = max(best, len(n))
				}
			}
			return true, best
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			if m.GetTransportProtocol() == "" {
				return false, 0
			}
			return true, boolScore(m.GetTransportProtocol() == transport)
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			if len(m.GetApplicationProtocols()) == 0 {
				return false, 0
			}
			for _, p := range alpn {
				if slices.Contains(m.GetApplicationProtocols(), p) {
					return true, 1
				}
			}
			return true, -1
		},
	}
	for _, step := range steps {
		var matched, unset []*listenerv3.FilterChain
		best := -1
		for _, fc := range cands {
			set, score := step(fc.GetFilterChainMatch())
			switch {
			case !set:
				unset = append(unset, fc)
			case score > best && score >= 0:
				best, matched = score, []*listenerv3.FilterChain{fc}
			case score == best && score >= 0:
				matched = append(matched, fc)
			}
		}
		if len(matched) > 0 {
			cands = matched
		} else {
			cands = unset
		}
	}
	if len(cands) > 0 {
		return cands[0], chainName(cands[0])
	}
	if d := l.GetDefaultFilterChain(); d != nil {
		return d, "default"
	}
	return nil, ""
}

func boolScore(b bool) int {
	if b {
		return 1
	}
	return -1
}

func chainName(fc *listenerv3.FilterChain) string {
	if fc.GetName() != "" {
		return fc.GetName()
	}
	return "unnamed"
}

func (s *Sim) http(hcm *hcmv3.HttpConnectionManager, r Request, res *Result) {
	for _, f := range hcm.GetHttpFilters() {
		if handled, ok := httpRBAC(f.GetTypedConfig(), r, res); handled && !ok {
			return
		}
		if handled, ok := jwtAuthn(f.GetTypedConfig(), r, res); handled && !ok {
			return
		}
		if handled, ok := extAuthz(f.GetTypedConfig(), r, res); handled && !ok {
			return
		}
	}
	rc := hcm.GetRouteConfig()
	if name := hcm.GetRds().GetRouteConfigName(); name != "" {
		res.RouteConfig = name
		rc = s.routes[name]
		if rc == nil {
			res.Err = fmt.Errorf("route configuration %q does not exist", name)
			return
		}
	}
	vh := virtualHost(rc, r.Authority)
	if vh == nil {
		res.Err = fmt.Errorf("route configuration %s: no virtual host for authority %q", rc.GetName(), r.Authority)
		return
	}
	res.VirtualHost, res.VirtualHostConfig = vh.GetName(), vh
	for i, rt := range vh.GetRoutes() {
		ok, p := routeMatches(rt.GetMatch(), r)
		if !ok {
			continue
		}
		res.Route, res.RouteIndex, res.MatchProbability = rt, i, p
		s.action(vh, rt, r, res)
		return
	}
	res.Err = fmt.Errorf("virtual host %s: no route matches %s %s", vh.GetName(), r.Method, r.Path)
}

// virtualHost selects by the Host header (case-insensitive): an exact
// domain, then the longest suffix wildcard ("*.foo.com", "*-bar.foo.com"),
// then the longest prefix wildcard ("foo.*"), then "*". The port is part
// of the host as sent (Envoy: route components, VirtualHost.domains).
func virtualHost(rc *routev3.RouteConfiguration, authority string) *routev3.VirtualHost {
	host := strings.ToLower(authority)
	var suffix, prefix, any *routev3.VirtualHost
	sufLen, preLen := -1, -1
	for _, vh := range rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			d = strings.ToLower(d)
			switch {
			case d == host:
				return vh
			case d == "*":
				if any == nil {
					any = vh
				}
			case strings.HasPrefix(d, "*") && strings.HasSuffix(host, d[1:]) && len(host) > len(d)-1:
				if len(d) > sufLen {
					suffix, sufLen = vh, len(d)
				}
			case strings.HasSuffix(d, "*") && strings.HasPrefix(host, d[:len(d)-1]) && len(host) > len(d)-1:
				if len(d) > preLen {
					prefix, preLen = vh, len(d)
				}
			}
		}
	}
	switch {
	case suffix != nil:
		return suffix
	case prefix != nil:
		return prefix
	}
	return any
}

// routeMatches applies a RouteMatch: the path specifier (prefix, path,
// safe_regex on the path without its query, path_separated_prefix;
// case_sensitive defaults to true), every header matcher, every query
// parameter matcher, the gRPC matcher; a runtime fraction is reported as
// the probability of matching.
func routeMatches(m *routev3.RouteMatch, r Request) (bool, float64) {
	path, query, _ := strings.Cut(r.Path, "?")
	cs := m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue()
	fold := func(s string) string {
		if cs {
			return s
		}
		return strings.ToLower(s)
	}
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		if !strings.HasPrefix(fold(path), fold(p.Prefix)) {
			return false, 0
		}
	case *routev3.RouteMatch_Path:
		if fold(path) != fold(p.Path) {
			return false, 0
		}
	case *routev3.RouteMatch_SafeRegex:
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil || !re.MatchString(path) {
			return false, 0
		}
	case *routev3.RouteMatch_PathSeparatedPrefix:
		pre := p.PathSeparatedPrefix
		if fold(path) != fold(pre) && !strings.HasPrefix(fold(path), fold(pre)+"/") {
			return false, 0
		}
	}
	for _, h := range m.GetHeaders() {
		if !headerMatches(h, r) {
			return false, 0
		}
	}
	if len(m.GetQueryParameters()) > 0 {
		q, _ := url.ParseQuery(query)
		for _, qm := range m.GetQueryParameters() {
			vals, present := q[qm.GetName()]
			switch {
			case qm.GetPresentMatch():
				if !present {
					return false, 0
				}
			case qm.GetStringMatch() != nil:
				if !present || !stringMatches(qm.GetStringMatch(), vals[0]) {
					return false, 0
				}
			}
		}
	}
	if m.GetGrpc() != nil && !strings.HasPrefix(r.Headers["content-type"], "application/grpc") {
		return false, 0
	}
	p := 1.0
	if rf := m.GetRuntimeFraction().GetDefaultValue(); rf != nil {
		p = float64(rf.GetNumerator()) / float64(denominator(rf.GetDenominator().String()))
	}
	return true, p
}

func denominator(d string) uint32 {
	switch d {
	case "TEN_THOUSAND":
		return 10000
	case "MILLION":
		return 1000000
	}
	return 100
}

// headerMatches applies a header matcher to the request's header (the
// pseudo-headers :method, :authority, :path, :scheme included). An absent
// header does not match; invert_match inverts the result either way
// (Envoy: route components, HeaderMatcher). The deprecated matcher fields
// (exact_match, prefix_match, ...) are not read: the generators emit
// string_match only.
func headerMatches(h *routev3.HeaderMatcher, r Request) bool {
	var v string
	var present bool
	switch h.GetName() {
	case ":method":
		v, present = r.Method, r.Method != ""
	case ":authority":
		v, present = r.Authority, r.Authority != ""
	case ":path":
		v, present = r.Path, r.Path != ""
	case ":scheme":
		v, present = r.Scheme, r.Scheme != ""
	default:
		v, present = r.Headers[strings.ToLower(h.GetName())]
	}
	var ok bool
	switch m := h.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		ok = present == m.PresentMatch
	case *routev3.HeaderMatcher_StringMatch:
		ok = present && stringMatches(m.StringMatch, v)
	case nil:
		ok = present
	}
	if h.GetInvertMatch() {
		return !ok
	}
	return ok
}

func stringMatches(m *matcherv3.StringMatcher, v string) bool {
	if m.GetIgnoreCase() {
		v = strings.ToLower(v)
	}
	lc := func(s string) string {
		if m.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == lc(p.Exact)
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, lc(p.Prefix))
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, lc(p.Suffix))
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(v, lc(p.Contains))
	case *matcherv3.StringMatcher_SafeRegex:
		return fullMatch(p.SafeRegex.GetRegex(), v)
	}
	return false
}

// fullMatch: Envoy's safe_regex matches the whole value (RE2; Go's regexp
// is RE2 too).
func fullMatch(re, v string) bool {
	c, err := regexp.Compile("^(?:" + re + ")$")
	return err == nil && c.MatchString(v)
}

// action reads what the route does. Route-level settings win over the
// virtual host's (retry policy, per-filter config).
func (s *Sim) action(vh *routev3.VirtualHost, rt *routev3.Route, r Request, res *Result) {
	perFilter := func(name string) *anypb.Any {
		if a := rt.GetTypedPerFilterConfig()[name]; a != nil {
			return a
		}
		return vh.GetTypedPerFilterConfig()[name]
	}
	if a := perFilter(build.FaultFilter); a != nil {
		res.Fault = new(faultv3.HTTPFault)
		if err := a.UnmarshalTo(res.Fault); err != nil {
			res.Err = fmt.Errorf("route %s: fault config: %w", rt.GetName(), err)
		}
	}
	if a := perFilter(build.CorsFilter); a != nil {
		res.CORS = new(corsv3.CorsPolicy)
		if err := a.UnmarshalTo(res.CORS); err != nil {
			res.Err = fmt.Errorf("route %s: CORS config: %w", rt.GetName(), err)
		}
	}
	switch a := rt.GetAction().(type) {
	case *routev3.Route_Redirect:
		res.Redirect = a.Redirect
	case *routev3.Route_DirectResponse:
		res.DirectResponse = a.DirectResponse
	case *routev3.Route_Route:
		ra := a.Route
		if c := ra.GetCluster(); c != "" {
			res.Clusters = []Destination{s.destination(c, 1, r)}
		}
		for _, wc := range ra.GetWeightedClusters().GetClusters() {
			res.Clusters = append(res.Clusters, s.destination(wc.GetName(), wc.GetWeight().GetValue(), r))
		}
		if t := ra.GetTimeout(); t != nil {
			d := t.AsDuration()
			res.Timeout = &d
		}
		res.Retry = ra.GetRetryPolicy()
		if res.Retry == nil {
			res.Retry = vh.GetRetryPolicy()
		}
		res.Mirrors = ra.GetRequestMirrorPolicies()
		res.Hash = ra.GetHashPolicy()
	}
}

// destination resolves a cluster and its endpoints: EDS by the cluster's
// service_name (else its name), inline load_assignment for static and DNS
// clusters, the request's own destination for ORIGINAL_DST.
func (s *Sim) destination(name string, weight uint32, r Request) Destination {
	d := Destination{Name: name, Weight: weight}
	c := s.clusters[name]
	if c == nil {
		d.Err = fmt.Errorf("cluster %q does not exist", name)
		return d
	}
	d.Cluster = c
	var la *endpointv3.ClusterLoadAssignment
	switch c.GetType() {
	case clusterv3.Cluster_EDS:
		svc := c.GetEdsClusterConfig().GetServiceName()
		if svc == "" {
			svc = name
		}
		if la = s.endpoints[svc]; la == nil {
			d.Err = fmt.Errorf("cluster %s: EDS resource %q does not exist", name, svc)
			return d
		}
	case clusterv3.Cluster_ORIGINAL_DST:
		d.Endpoints = []Endpoint{{Address: r.IP, Port: r.Port, Weight: 1, LocalityWeight: 1, TransportSocket: transportSocketFor(c, nil)}}
		return d
	default:
		la = c.GetLoadAssignment()
	}
	for _, lle := range la.GetEndpoints() {
		loc := strings.TrimRight(lle.GetLocality().GetRegion()+"/"+lle.GetLocality().GetZone()+"/"+lle.GetLocality().GetSubZone(), "/")
		for _, e := range lle.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			d.Endpoints = append(d.Endpoints, Endpoint{
				Address: sa.GetAddress(), Port: sa.GetPortValue(), Priority: lle.GetPriority(), Locality: loc,
				LocalityWeight: lle.GetLoadBalancingWeight().GetValue(), Weight: max(1, e.GetLoadBalancingWeight().GetValue()),
				Health: e.GetHealthStatus(), TransportSocket: transportSocketFor(c, e.GetMetadata()),
			})
		}
	}
	sort.SliceStable(d.Endpoints, func(i, j int) bool {
		a, b := d.Endpoints[i], d.Endpoints[j]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if a.Locality != b.Locality {
			return a.Locality < b.Locality
		}
		return a.Address < b.Address
	})
	return d
}

// Addresses lists "ip:port" of the endpoints at a priority.
func (d Destination) Addresses(priority uint32) []string {
	var out []string
	for _, e := range d.Endpoints {
		if e.Priority == priority {
			out = append(out, fmt.Sprintf("%s:%d", e.Address, e.Port))
		}
	}
	return out
}

// ClusterNames lists the destinations' names and weights, "name=weight".
func ClusterNames(ds []Destination) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%s=%d", d.Name, d.Weight)
	}
	return out
}
