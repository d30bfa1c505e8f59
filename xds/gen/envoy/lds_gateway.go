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

// gatewayPort is one gateway listener being built.
type gatewayPort struct {
	port    uint32 // the port the listener binds (gatewayListenPort)
	kind    gatewayPortKind
	owner   string // the config whose server decided kind
	chains  []*listenerv3.FilterChain
	claimed map[string]string // server name ("" = no SNI match) -> config
	sni     bool
}

// gateways adds one listener per port of the servers of the Gateways
// selecting this router. Gateways come sorted, so on any collision the
// first server (by gateway namespace/name, then server order) wins.
func (b *listenerBuilder) gateways() {
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
			switch kind {
			case gwHTTP:
				if len(gp.chains) == 0 {
					gp.chains = append(gp.chains, &listenerv3.FilterChain{Filters: []*listenerv3.Filter{
						rdsHCM(GatewayHTTPRouteName(num), GatewayHTTPRouteName(num), b.gatewayHTTPFilters(), true),
					}})
				}
			case gwTCP:
				b.gatewayTCPServer(gp, gw, field, srv)
			case gwSNI:
				if srv.GetTls().GetMode() == networking.ServerTLSSettings_PASSTHROUGH {
					b.gatewayPassthroughServer(gp, gw, srv)
				} else {
					b.gatewayTerminatedServer(gp, gw, i, field, srv)
				}
			}
		}
	}
	ports := make([]uint32, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	for _, port := range ports {
		gp := byPort[port]
		if len(gp.chains) == 0 {
			continue // no server on it had a route; Envoy needs a chain
		}
		l := listener(OutboundListenerName("0.0.0.0", port), "0.0.0.0", port, true, corev3.TrafficDirection_OUTBOUND)
		if gp.sni {
			l.ListenerFilters = []*listenerv3.ListenerFilter{b.tlsInspector}
		}
		l.FilterChains = gp.chains
		b.add(l)
	}
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
		switch mode := srv.GetTls().GetMode(); mode {
		case networking.ServerTLSSettings_PASSTHROUGH, networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL:
			return gwSNI, true
		default:
			b.problems.Addf(gw.Ref(), field+".tls.mode", "tls mode %s is not supported; the server is ignored", mode)
			return 0, false
		}
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

// gatewayTCPServer adds the tcp_proxy chain of a TCP server: the first
// applicable tcp route of its VirtualServices (sorted by namespace/name).
func (b *listenerBuilder) gatewayTCPServer(gp *gatewayPort, gw *mesh.Config, field string, srv *networking.Server) {
	num := gp.port
	dests := b.gatewayTCPRoute(gw, srv)
	if dests == nil {
		return
	}
	if owner, taken := gp.claimed[""]; taken {
		b.problems.Addf(gw.Ref(), field, "port %d already forwards TCP for %s; this server is ignored", num, owner)
		return
	}
	gp.claimed[""] = gw.Ref()
	gp.chains = append(gp.chains, &listenerv3.FilterChain{Filters: b.gatewayTCPFilters(tcpProxy("gateway_tcp_"+portString(num), dests))})
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

// gatewayPassthroughServer adds one chain per applicable tls route match
// of the server's VirtualServices: SNI (the match's sniHosts the server
// admits) to tcp_proxy, TLS untouched.
func (b *listenerBuilder) gatewayPassthroughServer(gp *gatewayPort, gw *mesh.Config, srv *networking.Server) {
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
				gp.sni = true
				gp.chains = append(gp.chains, &listenerv3.FilterChain{
					FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: names},
					Filters:          b.gatewayTCPFilters(tcpProxy("gateway_passthrough_"+portString(gp.port)+"_"+names[0], dests)),
				})
			}
		}
	}
}

// gatewayTerminatedServer adds the chain of a SIMPLE or MUTUAL server:
// matched by the server's hosts as SNI ("*" matches any or no SNI), TLS
// terminated with the server's certificate, then an HCM on the server's
// own route configuration (HTTPS) or tcp_proxy by tcp routes (TLS).
func (b *listenerBuilder) gatewayTerminatedServer(gp *gatewayPort, gw *mesh.Config, index int, field string, srv *networking.Server) {
	num := gp.port
	var names []string
	for _, h := range serverHosts(gw, srv) {
		if h.host == "*" {
			names = nil
			break
		}
		if !slices.Contains(names, h.host) {
			names = append(names, h.host)
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
			b.problems.Addf(gw.Ref(), field+".hosts", "%s on port %d is already served by %s; this server is ignored", what, num, owner)
			return
		}
	}
	ts, ok := b.downstreamTLS(gw, field, srv)
	if !ok {
		return
	}
	serverName := serverID(srv, index)
	var filters []*listenerv3.Filter
	var filter *listenerv3.Filter
	if strings.ToUpper(srv.GetPort().GetProtocol()) == "HTTPS" {
		route := GatewayHTTPSRouteName(num, serverName, gw.Object.Name, gw.Object.Namespace)
		filter = rdsHCM(route, route, b.gatewayHTTPFilters(), true)
	} else {
		dests := b.gatewayTCPRoute(gw, srv)
		if dests == nil {
			return
		}
		filter = tcpProxy("gateway_tls_"+portString(num)+"_"+serverName, dests)
	}
	if filter.GetName() == TCPProxyFilter {
		filters = b.gatewayTCPFilters(filter)
	} else {
		filters = []*listenerv3.Filter{filter}
	}
	for _, k := range keys {
		gp.claimed[k] = gw.Ref()
	}
	chain := &listenerv3.FilterChain{
		Name:            "https." + portString(num) + "." + serverName + "." + gw.Object.Name + "." + gw.Object.Namespace,
		TransportSocket: ts,
		Filters:         filters,
	}
	if len(names) > 0 {
		chain.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: names}
		gp.sni = true
	}
	gp.chains = append(gp.chains, chain)
}

// downstreamTLS is the TLS context of a SIMPLE/MUTUAL server: the
// certificate from SDS credentialName (or files), for MUTUAL a required
// client certificate validated by credentialName-cacert (or the
// caCertificates file, or caCertCredentialName) and subjectAltNames.
//
// credentialName secrets come from the gateway's own agent (the node's
// SDS_CLUSTER), which gets them from the spoke of the gateway's cluster:
// a gateway's private keys never reach the hub (decision 038). A gateway
// without an agent cannot be served them, and its server is reported.
func (b *listenerBuilder) downstreamTLS(gw *mesh.Config, field string, srv *networking.Server) (*corev3.TransportSocket, bool) {
	t := srv.GetTls()
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
	if t.GetMode() == networking.ServerTLSSettings_MUTUAL {
		dtc.RequireClientCertificate = wrapperspb.Bool(true)
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
			b.problems.Addf(gw.Ref(), field+".tls.caCertificates", "a MUTUAL server needs credentialName or caCertificates to validate clients; the server is ignored")
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
