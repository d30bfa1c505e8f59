package envoy

import (
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
)

// What a gateway port carries; the first server on a port decides it.
type gatewayPortKind int

const (
	gwHTTP gatewayPortKind = iota + 1 // plain HTTP: one chain, RDS http.PORT
	gwTCP                             // plain TCP: one chain, tcp_proxy
	gwSNI                             // TLS: chains by SNI (terminated or passed through)
)

func (k gatewayPortKind) String() string {
	switch k {
	case gwHTTP:
		return "HTTP"
	case gwTCP:
		return "TCP"
	}
	return "TLS"
}

// gatewayPort is one port of a router: the servers it serves, in
// gateway then server order.
type gatewayPort struct {
	port    uint32 // the port the listener binds (gatewayListenPort)
	kind    gatewayPortKind
	owner   string // the config whose server decided kind
	servers []*gatewayServer
	claimed map[string]string // server name ("" = no SNI match) -> config
	sni     bool              // some chain matches by SNI: the listener needs tls_inspector
}

// gatewayServer is one server a router serves, as LDS (its filter chains)
// and RDS (its route configuration) both see it: gatewayPlan decides once
// which servers are served, so that every route configuration RDS sends
// is one a listener refers to.
type gatewayServer struct {
	gw    *mesh.Config
	index int
	field string
	srv   *networking.Server
	// route is the route configuration of an HTTP or TLS-terminated HTTPS
	// server ("" for the others).
	route string
	// names are the server names a terminated server's chain matches
	// (nil: any); ts is its TLS.
	names []string
	ts    *corev3.TransportSocket
	// tcp is where a TCP server, or a TLS-terminated TLS server, sends
	// connections.
	tcp []weightedCluster
	// sni are the chains of a PASSTHROUGH or AUTO_PASSTHROUGH server.
	sni []sniChain
}

// sniChain is one passthrough chain: connections whose SNI is one of
// names (and, when alpn is set, whose ALPN offers one of alpn) go to dests
// with TLS untouched.
type sniChain struct {
	names []string
	alpn  []string
	dests []weightedCluster
	stat  string
	// mesh chains (AUTO_PASSTHROUGH) carry mesh mTLS the destination's
	// sidecar authorizes with the client's own identity: the gateway's
	// authorization filters do not apply (Istio's behaviour).
	mesh bool
}

// gateways adds one listener per port of the servers of the Gateways
// selecting this router (gatewayPlan).
func (b *listenerBuilder) gateways() {
	for _, gp := range b.gatewayPlan() {
		var chains []*listenerv3.FilterChain
		for _, s := range gp.servers {
			chains = b.gatewayChains(chains, gp, s)
		}
		if len(chains) == 0 {
			continue
		}
		l := listener(OutboundListenerName("0.0.0.0", gp.port), "0.0.0.0", gp.port, true, corev3.TrafficDirection_OUTBOUND)
		if gp.sni {
			l.ListenerFilters = []*listenerv3.ListenerFilter{b.tlsInspector}
		}
		l.FilterChains = chains
		b.add(l)
	}
}

// gatewayPlan decides which servers of the Gateways selecting this
// router are served, on which port, and reports the others. Gateways come
// sorted, so on any collision the first server (by gateway
// namespace/name, then server order) wins. Ports come in order.
//
// The plan is derived once per View (LDS and RDS of one push share it)
// and read-only.
func (b *listenerBuilder) gatewayPlan() []*gatewayPort {
	return b.v.Memo(gatewayPlanKey{}, func() any { return b.newGatewayPlan() }).([]*gatewayPort)
}

// gatewayPlanKey memoizes gatewayPlan on the View.
type gatewayPlanKey struct{}

// newGatewayPlan builds gatewayPlan's plan.
func (b *listenerBuilder) newGatewayPlan() []*gatewayPort {
	v := b.v
	byPort := map[uint32]*gatewayPort{}
	for _, gw := range v.Gateways() {
		spec, _ := gw.Object.Spec.(*networking.Gateway)
		for i, srv := range spec.GetServers() {
			field := "spec.servers[" + strconv.Itoa(i) + "]"
			kind, ok := b.serverKind(gw, field, srv)
			if !ok {
				continue
			}
			if srv.GetBind() != "" {
				b.problems.Addf(gw.Ref(), field+".bind", "bind is not supported; the server listens on 0.0.0.0")
			}
			num := gatewayListenPort(v, srv.GetPort().GetNumber())
			gp := byPort[num]
			if gp == nil {
				gp = &gatewayPort{port: num, kind: kind, owner: gw.Ref(), claimed: map[string]string{}}
				byPort[num] = gp
			}
			if gp.kind != kind {
				b.problems.Addf(gw.Ref(), field+".port", "port %d already serves %s for %s; this %s server is ignored", num, gp.kind, gp.owner, kind)
				continue
			}
			s := &gatewayServer{gw: gw, index: i, field: field, srv: srv}
			var served bool
			switch kind {
			case gwHTTP:
				s.route, served = GatewayHTTPRouteName(num), true
			case gwTCP:
				served = b.gatewayTCPServer(gp, s)
			case gwSNI:
				switch srv.GetTls().GetMode() {
				case networking.ServerTLSSettings_PASSTHROUGH:
					served = b.gatewayPassthroughServer(gp, s)
				case networking.ServerTLSSettings_AUTO_PASSTHROUGH:
					served = b.gatewayAutoPassthroughServer(gp, s)
				default:
					served = b.gatewayTerminatedServer(gp, s)
				}
			}
			if served {
				gp.servers = append(gp.servers, s)
			}
		}
	}
	ports := make([]*gatewayPort, 0, len(byPort))
	for _, gp := range byPort {
		ports = append(ports, gp)
	}
	slices.SortFunc(ports, func(a, b *gatewayPort) int { return int(a.port) - int(b.port) })
	return ports
}

// gatewayChains appends the filter chains of one served server.
func (b *listenerBuilder) gatewayChains(chains []*listenerv3.FilterChain, gp *gatewayPort, s *gatewayServer) []*listenerv3.FilterChain {
	port := portString(gp.port)
	switch {
	case gp.kind == gwHTTP:
		// All plain HTTP servers of a port share one chain and one
		// route configuration.
		if len(chains) == 0 {
			chains = append(chains, &listenerv3.FilterChain{Filters: []*listenerv3.Filter{b.rdsHCM(s.route, s.route, b.gatewayHTTPFilters(), true)}})
		}
	case gp.kind == gwTCP:
		chains = append(chains, &listenerv3.FilterChain{Filters: b.gatewayTCPFilters(b.tcpProxy(policy.ClientSide, "gateway_tcp_"+port, s.tcp))})
	case s.ts != nil:
		serverName := serverID(s.srv, s.index)
		var filters []*listenerv3.Filter
		if s.route != "" {
			filters = []*listenerv3.Filter{b.rdsHCM(s.route, s.route, b.gatewayHTTPFilters(), true)}
		} else {
			filters = b.gatewayTCPFilters(b.tcpProxy(policy.ClientSide, "gateway_tls_"+port+"_"+serverName, s.tcp))
		}
		chain := &listenerv3.FilterChain{
			Name:            "https." + port + "." + serverName + "." + s.gw.Object.Name + "." + s.gw.Object.Namespace,
			TransportSocket: s.ts,
			Filters:         filters,
		}
		if len(s.names) > 0 {
			chain.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: s.names}
		}
		chains = append(chains, chain)
	default:
		for _, c := range s.sni {
			proxy := b.tcpProxy(policy.ClientSide, c.stat, c.dests)
			filters := []*listenerv3.Filter{proxy}
			if !c.mesh {
				filters = b.gatewayTCPFilters(proxy)
			}
			chains = append(chains, &listenerv3.FilterChain{
				FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: c.names, ApplicationProtocols: c.alpn},
				Filters:          filters,
			})
		}
	}
	return chains
}

// gatewayListenPort is the port a router listens on for a Gateway server
// port: the target port of the router's own service port with that number
// (a gateway's Service commonly maps 80 to 8080 so that the proxy need not
// bind a privileged port), else the server port itself. Listener and
// route configuration names (http.PORT, https.PORT...) use this port, so
// RDS must name gateway routes by it too.
func gatewayListenPort(v *scope.View, serverPort uint32) uint32 {
	for _, ip := range v.InboundPorts() {
		if ip.Port.Number == serverPort {
			return ip.TargetPort
		}
	}
	return serverPort
}

// serverKind classifies a server; false (reported) when it cannot be
// served.
func (b *listenerBuilder) serverKind(gw *mesh.Config, field string, srv *networking.Server) (gatewayPortKind, bool) {
	proto := strings.ToUpper(srv.GetPort().GetProtocol())
	if srv.GetPort().GetNumber() == 0 {
		b.problems.Addf(gw.Ref(), field+".port.number", "a server needs a port number")
		return 0, false
	}
	switch {
	case isHTTP(proto):
		// tls on a plain HTTP server only carries httpsRedirect (routes).
		return gwHTTP, true
	case isTLS(proto):
		if srv.GetTls() == nil {
			b.problems.Addf(gw.Ref(), field+".tls", "a %s server needs tls settings", proto)
			return 0, false
		}
		return gwSNI, true
	default:
		return gwTCP, true
	}
}

// serverHost is one of a server's hosts: namespace ("*" any) and host.
type serverHost struct{ namespace, host string }

func serverHosts(gw *mesh.Config, srv *networking.Server) []serverHost {
	out := make([]serverHost, 0, len(srv.GetHosts()))
	for _, h := range srv.GetHosts() {
		ns, host, ok := strings.Cut(h, "/")
		if !ok {
			ns, host = "*", h
		} else if ns == "." {
			ns = gw.Object.Namespace
		}
		out = append(out, serverHost{namespace: ns, host: host})
	}
	return out
}

// acceptsHost reports whether one of a server's hosts admits host from a
// VirtualService in namespace vsNS (either may be a wildcard).
func acceptsHost(hosts []serverHost, vsNS, host string) bool {
	for _, h := range hosts {
		if (h.namespace == "*" || h.namespace == vsNS) && (scope.HostMatches(h.host, host) || scope.HostMatches(host, h.host)) {
			return true
		}
	}
	return false
}

// gatewayVSFor returns the VirtualServices bound to gw whose hosts the
// server admits.
func (b *listenerBuilder) gatewayVSFor(gw *mesh.Config, hosts []serverHost) []*mesh.Config {
	var out []*mesh.Config
	for _, c := range b.v.GatewayVirtualServices(gw) {
		for _, h := range c.VirtualService().GetHosts() {
			if acceptsHost(hosts, c.Object.Namespace, h) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// gatewayTCPServer plans a TCP server: the first applicable tcp route of
// its VirtualServices (sorted by namespace/name); one per port.
func (b *listenerBuilder) gatewayTCPServer(gp *gatewayPort, s *gatewayServer) bool {
	s.tcp = b.gatewayTCPRoute(s.gw, s.srv)
	if s.tcp == nil {
		return false
	}
	if owner, taken := gp.claimed[""]; taken {
		b.problems.Addf(s.gw.Ref(), s.field, "port %d already forwards TCP for %s; this server is ignored", gp.port, owner)
		return false
	}
	gp.claimed[""] = s.gw.Ref()
	return true
}

// gatewayTCPRoute finds where a (plain or TLS-terminated) TCP server
// sends connections, nil when no tcp route applies.
func (b *listenerBuilder) gatewayTCPRoute(gw *mesh.Config, srv *networking.Server) []weightedCluster {
	num := srv.GetPort().GetNumber()
	for _, vs := range b.gatewayVSFor(gw, serverHosts(gw, srv)) {
		for i, r := range vs.VirtualService().GetTcp() {
			if !b.anyL4Match(r.GetMatch(), num, gw, vs.Object.Namespace) {
				continue
			}
			if d := b.l4Routes(vs, "spec.tcp["+strconv.Itoa(i)+"].route", r.GetRoute(), 0); d != nil {
				return d
			}
		}
	}
	return nil
}

// gatewayPassthroughServer plans one chain per applicable tls route match
// of the server's VirtualServices: SNI (the match's sniHosts the server
// admits) to tcp_proxy, TLS untouched.
func (b *listenerBuilder) gatewayPassthroughServer(gp *gatewayPort, s *gatewayServer) bool {
	gw, srv := s.gw, s.srv
	num := srv.GetPort().GetNumber()
	hosts := serverHosts(gw, srv)
	for _, vs := range b.gatewayVSFor(gw, hosts) {
		for i, r := range vs.VirtualService().GetTls() {
			rf := "spec.tls[" + strconv.Itoa(i) + "]"
			for j, m := range r.GetMatch() {
				if !b.l4Applies(m, num, gw, vs.Object.Namespace) {
					continue
				}
				var admitted []string
				for _, sni := range m.GetSniHosts() {
					if acceptsHost(hosts, vs.Object.Namespace, sni) {
						admitted = append(admitted, sni)
					}
				}
				names := b.claim(gp.claimed, admitted, vs.Ref(), rf+".match["+strconv.Itoa(j)+"].sniHosts")
				if len(names) == 0 {
					continue
				}
				dests := b.l4Routes(vs, rf+".route", r.GetRoute(), 0)
				if dests == nil {
					continue
				}
				s.sni = append(s.sni, sniChain{names: names, dests: dests, stat: "gateway_passthrough_" + portString(gp.port) + "_" + names[0]})
			}
		}
	}
	gp.sni = gp.sni || len(s.sni) > 0
	return len(s.sni) > 0
}

// gatewayAutoPassthroughServer plans an AUTO_PASSTHROUGH server, Istio's
// east-west gateway: no VirtualService, one chain per cluster of every
// mesh service the server's hosts match, matching the SNI a mesh client
// sends for it (IstioMutualSNI, "outbound_.PORT_.SUBSET_.HOST") and the
// mesh's mTLS ALPNs, to the cluster of that name (sniDNAT clusters:
// mTLS-capable endpoints only, no TLS of the gateway's own). The client's
// mTLS reaches the destination's sidecar untouched.
func (b *listenerBuilder) gatewayAutoPassthroughServer(gp *gatewayPort, s *gatewayServer) bool {
	hosts := autoPassthroughHosts(s.srv)
	for _, svc := range b.v.Services() {
		if !autoPassthroughService(hosts, svc) {
			continue
		}
		serviceClusters(b.v, svc, nil, func(oc *outboundCluster) {
			if !sniDNATCluster(oc) {
				return
			}
			sni := IstioMutualSNI(svc.Hostname, oc.Port.Number, oc.Subset)
			if names := b.claim(gp.claimed, []string{sni}, s.gw.Ref(), s.field+".hosts"); len(names) > 0 {
				s.sni = append(s.sni, sniChain{names: names, alpn: meshALPN, dests: []weightedCluster{{cluster: sni, weight: 1}}, stat: sni, mesh: true})
			}
		})
	}
	gp.sni = gp.sni || len(s.sni) > 0
	return len(s.sni) > 0
}

// gatewayTerminatedServer plans the chain of a SIMPLE, MUTUAL,
// OPTIONAL_MUTUAL or ISTIO_MUTUAL server: matched by the server's hosts as
// SNI ("*" matches any or no SNI), TLS terminated (downstreamTLS), then an
// HCM on the server's own route configuration (HTTPS) or tcp_proxy by tcp
// routes (TLS).
func (b *listenerBuilder) gatewayTerminatedServer(gp *gatewayPort, s *gatewayServer) bool {
	gw, srv := s.gw, s.srv
	num := gp.port
	names := make([]string, 0, len(srv.GetHosts()))
	for _, h := range srv.GetHosts() {
		host := h // serverHosts' host, without its namespace
		if _, after, ok := strings.Cut(h, "/"); ok {
			host = after
		}
		if host == "*" {
			names = nil
			break
		}
		if !slices.Contains(names, host) {
			names = append(names, host)
		}
	}
	keys := names
	if len(keys) == 0 {
		keys = []string{""}
	}
	for _, k := range keys {
		if owner, taken := gp.claimed[k]; taken {
			what := "server name " + k
			if k == "" {
				what = "the match of any server name"
			}
			b.problems.Addf(gw.Ref(), s.field+".hosts", "%s on port %d is already served by %s; this server is ignored", what, num, owner)
			return false
		}
	}
	ts, ok := b.downstreamTLS(gw, s.field, srv)
	if !ok {
		return false
	}
	if strings.ToUpper(srv.GetPort().GetProtocol()) == "HTTPS" {
		s.route = GatewayHTTPSRouteName(num, serverID(srv, s.index), gw.Object.Name, gw.Object.Namespace)
	} else if s.tcp = b.gatewayTCPRoute(gw, srv); s.tcp == nil {
		return false
	}
	ref := gw.Ref()
	for _, k := range keys {
		gp.claimed[k] = ref
	}
	s.names, s.ts = names, ts
	gp.sni = gp.sni || len(names) > 0
	return true
}

// downstreamTLS is the TLS context of a terminating server. ISTIO_MUTUAL
// is the mesh's mTLS (gatewayMeshTLS). The others take the certificate
// from SDS credentialName (or files); MUTUAL requires a client
// certificate and OPTIONAL_MUTUAL asks for one, validated by
// credentialName-cacert (or the caCertificates file, or
// caCertCredentialName) and subjectAltNames.
//
// credentialName secrets come from the gateway's own agent (the node's
// SDS_CLUSTER), which gets them from the spoke of the gateway's cluster:
// a gateway's private keys never reach the hub (decision 038). A gateway
// without an agent cannot be served them, and its server is reported.
func (b *listenerBuilder) downstreamTLS(gw *mesh.Config, field string, srv *networking.Server) (*corev3.TransportSocket, bool) {
	t := srv.GetTls()
	if t.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL {
		return b.gatewayMeshTLS(srv), true
	}
	ctx := &tlsv3.CommonTlsContext{}
	if strings.ToUpper(srv.GetPort().GetProtocol()) == "HTTPS" {
		ctx.AlpnProtocols = []string{"h2", "http/1.1"}
	}
	agent := b.v.Key().SDSCluster
	if agent == "" && (t.GetCredentialName() != "" || t.GetCaCertCredentialName() != "") {
		b.problems.Addf(gw.Ref(), field+".tls.credentialName", "credentialName is served to a gateway by its nave-agent, from a Secret in its cluster; this gateway has no agent (its node has no SDS_CLUSTER): use serverCertificate and privateKey files; the server is ignored")
		return nil, false
	}
	credentials := build.SDSConfigSource(agent)
	switch {
	case t.GetCredentialName() != "":
		ctx.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{{Name: t.GetCredentialName(), SdsConfig: credentials}}
	case t.GetServerCertificate() != "" && t.GetPrivateKey() != "":
		ctx.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: fileSource(t.GetServerCertificate()),
			PrivateKey:       fileSource(t.GetPrivateKey()),
		}}
	default:
		b.problems.Addf(gw.Ref(), field+".tls.credentialName", "a %s server needs credentialName (or serverCertificate and privateKey); the server is ignored", t.GetMode())
		return nil, false
	}
	if p := tlsParams(t); p != nil {
		ctx.TlsParams = p
	}
	dtc := &tlsv3.DownstreamTlsContext{CommonTlsContext: ctx}
	if mode := t.GetMode(); mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL {
		// OPTIONAL_MUTUAL validates a certificate the client presents
		// and lets a client without one through.
		if mode == networking.ServerTLSSettings_MUTUAL {
			dtc.RequireClientCertificate = wrapperspb.Bool(true)
		}
		sans := sanMatchers(t.GetSubjectAltNames())
		var sds *tlsv3.SdsSecretConfig
		switch {
		case t.GetCaCertCredentialName() != "":
			sds = &tlsv3.SdsSecretConfig{Name: t.GetCaCertCredentialName(), SdsConfig: credentials}
		case t.GetCredentialName() != "":
			sds = &tlsv3.SdsSecretConfig{Name: t.GetCredentialName() + build.CACertSuffix, SdsConfig: credentials}
		case t.GetCaCertificates() != "":
			ctx.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa:                 fileSource(t.GetCaCertificates()),
				MatchTypedSubjectAltNames: sans,
			}}
		default:
			b.problems.Addf(gw.Ref(), field+".tls.caCertificates", "a %s server needs credentialName or caCertificates to validate clients; the server is ignored", mode)
			return nil, false
		}
		if sds != nil {
			// The SDS secret supplies the trusted CA; the SAN matchers
			// merge in from the default context (Envoy docs,
			// "CombinedCertificateValidationContext").
			ctx.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
				ValidationContextSdsSecretConfig: sds,
			}}
		}
	}
	return &corev3.TransportSocket{Name: build.TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: build.Any(dtc)}}, true
}

// gatewayMeshTLS is the TLS of an ISTIO_MUTUAL server: the gateway's own
// workload certificate and the mesh roots from its agent's SDS ("default"
// and "ROOTCA", as a sidecar's inbound mTLS), a client certificate
// required and validated against the mesh roots and the server's
// subjectAltNames, else the mesh's trust domain (Istio accepts any
// certificate the roots signed). HTTPS negotiates h2 or http/1.1, TLS
// Istio's mesh values. Servers without subjectAltNames or TLS parameters
// share one socket per builder.
func (b *listenerBuilder) gatewayMeshTLS(srv *networking.Server) *corev3.TransportSocket {
	t := srv.GetTls()
	https := strings.ToUpper(srv.GetPort().GetProtocol()) == "HTTPS"
	params := tlsParams(t)
	shared := len(t.GetSubjectAltNames()) == 0 && params == nil
	cached := &b.gatewayMTLS[0]
	if https {
		cached = &b.gatewayMTLS[1]
	}
	if shared && *cached != nil {
		return *cached
	}
	alpn := []string{"istio-peer-exchange", "istio"}
	if https {
		alpn = []string{"h2", "http/1.1"}
	}
	sds := build.SDSConfigSource(b.v.Key().SDSCluster)
	validation := meshValidation(b.v.Snapshot(), sds)
	if sans := sanMatchers(t.GetSubjectAltNames()); len(sans) > 0 {
		validation.CombinedValidationContext.DefaultValidationContext.MatchTypedSubjectAltNames = sans
	}
	ts := &corev3.TransportSocket{Name: build.TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: build.Any(&tlsv3.DownstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      params,
			AlpnProtocols:                  alpn,
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: build.WorkloadCertSecret, SdsConfig: sds}},
			ValidationContextType:          validation,
		},
		RequireClientCertificate: wrapperspb.Bool(true),
	})}}
	if shared {
		*cached = ts
	}
	return ts
}

func fileSource(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

// tlsParams maps a server's protocol versions and cipher suites; nil when
// it sets none.
func tlsParams(t *networking.ServerTLSSettings) *tlsv3.TlsParameters {
	if t.GetMinProtocolVersion() == networking.ServerTLSSettings_TLS_AUTO && t.GetMaxProtocolVersion() == networking.ServerTLSSettings_TLS_AUTO && len(t.GetCipherSuites()) == 0 {
		return nil
	}
	return &tlsv3.TlsParameters{
		TlsMinimumProtocolVersion: tlsVersion(t.GetMinProtocolVersion()),
		TlsMaximumProtocolVersion: tlsVersion(t.GetMaxProtocolVersion()),
		CipherSuites:              t.GetCipherSuites(),
	}
}

func tlsVersion(p networking.ServerTLSSettings_TLSProtocol) tlsv3.TlsParameters_TlsProtocol {
	switch p {
	case networking.ServerTLSSettings_TLSV1_0:
		return tlsv3.TlsParameters_TLSv1_0
	case networking.ServerTLSSettings_TLSV1_1:
		return tlsv3.TlsParameters_TLSv1_1
	case networking.ServerTLSSettings_TLSV1_2:
		return tlsv3.TlsParameters_TLSv1_2
	case networking.ServerTLSSettings_TLSV1_3:
		return tlsv3.TlsParameters_TLSv1_3
	}
	return tlsv3.TlsParameters_TLS_AUTO
}
