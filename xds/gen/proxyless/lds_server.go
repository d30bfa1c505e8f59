package proxyless

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// ServerListenerPrefix is grpc-go's default
// server_listener_resource_name_template without its "%s": an xDS gRPC
// server (xds.NewGRPCServer) asks for the listener named this followed by
// the address it listens on ("0.0.0.0:8080", "[::]:8080", "10.0.0.5:8080").
const ServerListenerPrefix = xdsbootstrap.ServerListenerPrefix

// Certificate provider instance and certificate names a proxyless gRPC
// server's security config names (gRFC A29): the bootstrap's
// certificate_providers must define the instance (e.g. file_watcher on the
// files the CA writes); the names follow the SDS secrets of sidecars.
const CertificateProvider = xdsbootstrap.CertificateProviderInstance

// ServerListenerName names the server listener for a gRPC server
// listening on hostport.
func ServerListenerName(hostport string) string { return ServerListenerPrefix + hostport }

// ServerListener generates the listener a proxyless gRPC server with
// key k asks for by name, for the workload k names (its namespace and
// labels select the policies; the listening port is the workload port):
//
//   - the address and port of the name, as grpc-go requires them to equal
//     its listening address;
//   - one default filter chain (grpc-go ignores chains that match on
//     destination port, server name, transport or application protocol):
//     an HTTP connection manager with the workload's AuthorizationPolicies
//     as RBAC filters (deny, then allow; AUDIT is left out, grpc-go
//     ignores LOG), the router, and an inline route configuration whose
//     one route has the non-forwarding action servers need (gRFC A36);
//   - with PeerAuthentication STRICT for the port, TLS that requires a
//     client certificate, with the identity and roots from certificate
//     provider instance CertificateProvider (gRFC A29). grpc-go cannot
//     tell TLS from plain text on one port and does not check peer SANs on
//     the server, so PERMISSIVE and DISABLE serve plain text, and STRICT
//     accepts any certificate the mesh roots signed (the trust domain is
//     not checked here; principal rules still are).
//
// RequestAuthentication does not apply (grpc-go has no JWT filter): rules
// on request principals or JWT claims match no request (grpc-go treats
// metadata matchers as never matching), which fails closed.
func ServerListener(s *mesh.Snapshot, k proxy.Key, name string) (*listenerv3.Listener, []mesh.Problem, error) {
	hostport, ok := strings.CutPrefix(name, ServerListenerPrefix)
	if !ok {
		return nil, nil, fmt.Errorf("listener %q is not a gRPC server listener (%s...)", name, ServerListenerPrefix)
	}
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, nil, fmt.Errorf("listener %q: listening address: %v", name, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, nil, fmt.Errorf("listener %q: port %q is not a number in 1-65535", name, portStr)
	}
	var problems []mesh.Problem
	seen := map[mesh.Problem]bool{}
	report := func(p mesh.Problem) {
		if !seen[p] {
			seen[p] = true
			problems = append(problems, p)
		}
	}
	labels := k.LabelMap()
	p := uint32(port)
	policies := policy.SelectAuthorizationPolicies(s, k.Namespace, labels, report)
	filters := policy.BuildRBAC(policies, grpcTarget(s), report).HTTPFilters(false)
	filters = append(filters, &hcmv3.HttpFilter{Name: build.RouterFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(&routerv3.Router{})}})
	cluster := build.InboundClusterName(p)
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "inbound_" + portStr,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: cluster,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "inbound|grpc|" + portStr,
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: filters,
	}
	chain := &listenerv3.FilterChain{Name: cluster, Filters: []*listenerv3.Filter{build.HCMFilter(hcm)}}
	if policy.SelectPeerAuthentications(s, k.Namespace, labels, report).Mode(p, report) == policy.MTLSStrict {
		chain.TransportSocket = &corev3.TransportSocket{Name: build.TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: build.Any(serverTLS())}}
	}
	return &listenerv3.Listener{
		Name:               name,
		Address:            build.SocketAddress(host, p),
		DefaultFilterChain: chain,
		TrafficDirection:   corev3.TrafficDirection_INBOUND,
	}, problems, nil
}

// serverTLS requires a client certificate; identity and roots come
// from the certificate provider (certificate names as the SDS secrets).
func serverTLS() *tlsv3.DownstreamTlsContext {
	return &tlsv3.DownstreamTlsContext{
		CommonTlsContext:         commonTLS(nil),
		RequireClientCertificate: wrapperspb.Bool(true),
	}
}

// ServerListeners generates the server listeners of every port the
// workload of proxyless key k serves (the target ports of the services
// with an endpoint at one of its IPs), each under the names of the
// wildcard listening addresses grpc-go reports ("0.0.0.0:PORT" and
// "[::]:PORT"), sorted by name. They depend on the key's namespace,
// labels and inbound ports only (not on the IPs themselves), so they can
// be cached like Envoy output (LabelSignature, InboundSignature).
func ServerListeners(s *mesh.Snapshot, k proxy.Key) ([]build.Resource, []mesh.Problem) {
	var out []build.Resource
	var problems []mesh.Problem
	for _, in := range scope.InboundPortsOf(s, k) {
		for _, host := range []string{"0.0.0.0", "::"} {
			name := ServerListenerName(net.JoinHostPort(host, strconv.FormatUint(uint64(in.TargetPort), 10)))
			l, ps, err := ServerListener(s, k, name)
			if err != nil {
				continue // cannot happen: the name is well formed
			}
			out = append(out, build.Resource{Name: name, Message: l})
			for _, p := range ps {
				if !slices.Contains(problems, p) {
					problems = append(problems, p)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b build.Resource) int { return strings.Compare(a.Name, b.Name) })
	return out, problems
}

// grpcTarget is the RBAC target of a proxyless server of the snapshot.
func grpcTarget(s *mesh.Snapshot) policy.RBACTarget {
	t := policy.Target(s)
	t.GRPC = true
	return t
}
