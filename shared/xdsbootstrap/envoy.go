package xdsbootstrap

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"strconv"
)

// Cluster names in an Envoy bootstrap (Istio's, so that dashboards and
// istioctl-style tools read them the same way).
const (
	// XDSCluster is the ADS cluster: the hub, then the fallback.
	XDSCluster = "xds-grpc"
	// SDSCluster is the agent's SDS server on a Unix socket.
	SDSCluster = "sds-grpc"
	// AdminCluster is Envoy's own admin server, behind the readiness
	// listener.
	AdminCluster = "envoy-admin"
	// ReadinessListener answers /ready from Envoy's admin.
	ReadinessListener = "readiness"
)

// Envoy describes an Envoy bootstrap: who the proxy is, where its xDS
// servers are, how it authenticates to them, and its local ports. A plain
// value: build one, call JSON.
type Envoy struct {
	// NodeID is Istio's TYPE~IP~POD.NAMESPACE~DOMAIN (NodeID builds it).
	NodeID string
	// Cluster is Envoy's service cluster (node.cluster), e.g. APP.NAMESPACE.
	Cluster  string
	Metadata map[string]any
	// XDSAddress is host:port of the hub's xDS listener; FallbackAddress,
	// when set, is a second endpoint of lower priority (used only while
	// the hub is unreachable).
	XDSAddress, FallbackAddress string
	// HubAddresses, when set, are more addresses of the hub, each its own
	// priority after XDSAddress and before FallbackAddress, dialled in
	// that order only while those before are unreachable: the replicas of
	// a replica set after a namespace's home (HomeOrder), then the one
	// address in front of all of them (decision 051). They present the
	// hub's certificate, as XDSAddress does.
	HubAddresses []string
	// ServerName is the name the hub's certificate must be valid for (SNI
	// and the SAN checked).
	ServerName string
	// HubCAPEM is the hub's serving CA, inlined as the ADS cluster's
	// validation context.
	HubCAPEM string
	// The mesh roots, inline (FallbackRootsPEM) or in a file
	// (FallbackRootsFile): with a FallbackAddress, the fallback endpoint
	// has a TLS context of its own (a transport socket match) that
	// verifies the spoke's cluster certificate with them, for the host of
	// FallbackAddress (its fallback.serverNames); the hub's endpoint keeps
	// the hub's CA and name. One of them is required with FallbackAddress.
	FallbackRootsPEM, FallbackRootsFile string
	// The proxy's own certificate for the ADS connection: from SDS on the
	// Unix socket SDSSocket (an agent in the pod serves it), or, when
	// SDSSocket is empty, from the files CertFile and KeyFile (a VM).
	SDSSocket         string
	CertFile, KeyFile string
	// AdminPort is Envoy's admin server on 127.0.0.1; ReadyPort, when not
	// zero, is a listener on every address answering /ready from it.
	AdminPort, ReadyPort int
}

// NodeID is Istio's node id for a workload: TYPE~IP~NAME.NAMESPACE~NAMESPACE.svc.DOMAIN
// (TYPE "sidecar" or "router").
func NodeID(typ, ip, name, namespace, domain string) string {
	return fmt.Sprintf("%s~%s~%s.%s~%s.svc.%s", typ, ip, name, namespace, namespace, domain)
}

// obj is a JSON object of the bootstrap.
type obj = map[string]any

// JSON renders the bootstrap in Envoy's JSON form (proto3 JSON of
// envoy.config.bootstrap.v3.Bootstrap). It returns an error naming the
// field that makes no bootstrap.
func (e *Envoy) JSON() ([]byte, error) {
	if e.NodeID == "" {
		return nil, fmt.Errorf("envoy bootstrap: the node id is empty")
	}
	hub, err := socketAddress(e.XDSAddress)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: xds address: %w", err)
	}
	if e.HubCAPEM == "" {
		return nil, fmt.Errorf("envoy bootstrap: the hub's CA is empty")
	}
	if e.SDSSocket == "" && (e.CertFile == "" || e.KeyFile == "") {
		return nil, fmt.Errorf("envoy bootstrap: needs an SDS socket, or a certificate file and a key file")
	}
	if e.AdminPort <= 0 || e.AdminPort > 65535 {
		return nil, fmt.Errorf("envoy bootstrap: admin port %d is not a port number", e.AdminPort)
	}
	endpoints := []any{obj{"priority": 0, "lb_endpoints": []any{obj{"endpoint": obj{"address": hub}}}}}
	for _, a := range e.HubAddresses {
		more, err := socketAddress(a)
		if err != nil {
			return nil, fmt.Errorf("envoy bootstrap: hub address: %w", err)
		}
		endpoints = append(endpoints, obj{"priority": len(endpoints), "lb_endpoints": []any{obj{"endpoint": obj{"address": more}}}})
	}
	if e.FallbackAddress != "" {
		fb, err := socketAddress(e.FallbackAddress)
		if err != nil {
			return nil, fmt.Errorf("envoy bootstrap: fallback address: %w", err)
		}
		if e.FallbackRootsPEM == "" && e.FallbackRootsFile == "" {
			return nil, fmt.Errorf("envoy bootstrap: a fallback address needs the mesh roots, to verify the spoke's cluster certificate")
		}
		endpoints = append(endpoints, obj{"priority": len(endpoints), "lb_endpoints": []any{obj{"endpoint": obj{"address": fb},
			"metadata": obj{"filter_metadata": obj{"envoy.transport_socket_match": obj{fallbackMatchKey: fallbackMatchValue}}}}}})
	}
	serverName := e.ServerName
	if serverName == "" {
		serverName, _, _ = net.SplitHostPort(e.XDSAddress)
	}
	validation := obj{"trusted_ca": obj{"inline_string": e.HubCAPEM}, "match_typed_subject_alt_names": []any{sanMatcher(serverName)}}
	common := obj{"validation_context": validation, "alpn_protocols": []any{"h2"}}
	clusters := []any{}
	if e.SDSSocket != "" {
		common["tls_certificate_sds_secret_configs"] = []any{obj{"name": WorkloadCertSecret, "sds_config": obj{
			"api_config_source": obj{"api_type": "GRPC", "transport_api_version": "V3",
				"grpc_services": []any{obj{"envoy_grpc": obj{"cluster_name": SDSCluster}}}},
			"resource_api_version": "V3"}}}
		clusters = append(clusters, obj{"name": SDSCluster, "type": "STATIC", "connect_timeout": "1s",
			"typed_extension_protocol_options": http2Options(obj{}),
			"load_assignment": obj{"cluster_name": SDSCluster, "endpoints": []any{obj{"lb_endpoints": []any{
				obj{"endpoint": obj{"address": obj{"pipe": obj{"path": e.SDSSocket}}}}}}}}})
	} else {
		common["tls_certificates"] = []any{obj{"certificate_chain": obj{"filename": e.CertFile}, "private_key": obj{"filename": e.KeyFile}}}
	}
	xdsType := "STATIC"
	for _, a := range append([]string{e.XDSAddress, e.FallbackAddress}, e.HubAddresses...) {
		if host, _, _ := net.SplitHostPort(a); a != "" && net.ParseIP(host) == nil {
			xdsType = "STRICT_DNS"
		}
	}
	xds := obj{"name": XDSCluster, "type": xdsType, "connect_timeout": "1s",
		"typed_extension_protocol_options": http2Options(obj{"connection_keepalive": obj{"interval": "30s", "timeout": "10s"}}),
		"load_assignment":                  obj{"cluster_name": XDSCluster, "endpoints": endpoints},
		"transport_socket":                 upstreamTLS(serverName, common)}
	if len(endpoints) > 1 {
		xds["outlier_detection"] = failoverDetection()
	}
	if e.FallbackAddress != "" {
		// The spoke's fallback server presents its cluster certificate,
		// of the mesh CA, valid for the host proxies dial it by.
		fbHost, _, _ := net.SplitHostPort(e.FallbackAddress)
		roots := obj{"inline_string": e.FallbackRootsPEM}
		if e.FallbackRootsPEM == "" {
			roots = obj{"filename": e.FallbackRootsFile}
		}
		fbCommon := maps.Clone(common)
		fbCommon["validation_context"] = obj{"trusted_ca": roots, "match_typed_subject_alt_names": []any{sanMatcher(fbHost)}}
		xds["transport_socket_matches"] = []any{obj{"name": "fallback", "match": obj{fallbackMatchKey: fallbackMatchValue},
			"transport_socket": upstreamTLS(fbHost, fbCommon)}}
	}
	clusters = append(clusters, xds)
	adminAddr := obj{"socket_address": obj{"address": "127.0.0.1", "port_value": e.AdminPort}}
	var listeners []any
	if e.ReadyPort != 0 {
		if e.ReadyPort < 0 || e.ReadyPort > 65535 || e.ReadyPort == e.AdminPort {
			return nil, fmt.Errorf("envoy bootstrap: ready port %d is not a port number distinct from the admin port", e.ReadyPort)
		}
		clusters = append(clusters, obj{"name": AdminCluster, "type": "STATIC", "connect_timeout": "1s",
			"load_assignment": obj{"cluster_name": AdminCluster, "endpoints": []any{obj{"lb_endpoints": []any{obj{"endpoint": obj{"address": adminAddr}}}}}}})
		listeners = append(listeners, readinessListener(e.ReadyPort))
	}
	static := obj{"clusters": clusters}
	if listeners != nil {
		static["listeners"] = listeners
	}
	node := obj{"id": e.NodeID}
	if e.Cluster != "" {
		node["cluster"] = e.Cluster
	}
	meta := make(map[string]any, len(e.Metadata)+1)
	for k, v := range e.Metadata {
		meta[k] = v
	}
	if e.SDSSocket != "" {
		meta[MetaSDSCluster] = SDSCluster // the hub points workload secrets there
	}
	if len(meta) > 0 {
		node["metadata"] = meta
	}
	ads := obj{"ads": obj{}, "resource_api_version": "V3"}
	doc := obj{
		"node":  node,
		"admin": obj{"address": adminAddr},
		"dynamic_resources": obj{
			"ads_config": obj{"api_type": "GRPC", "transport_api_version": "V3", "set_node_on_first_message_only": true,
				"grpc_services": []any{obj{"envoy_grpc": obj{"cluster_name": XDSCluster}}}},
			"cds_config": ads,
			"lds_config": ads,
		},
		"static_resources": static,
	}
	return json.MarshalIndent(doc, "", "  ")
}

// The endpoint metadata that gives the fallback endpoint its own TLS
// context (envoy.transport_socket_match).
const fallbackMatchKey, fallbackMatchValue = "nave.xds", "fallback"

// sanMatcher matches a DNS or IP SAN exactly.
func sanMatcher(name string) obj {
	sanType := "DNS"
	if net.ParseIP(name) != nil {
		sanType = "IP_ADDRESS"
	}
	return obj{"san_type": sanType, "matcher": obj{"exact": name}}
}

// upstreamTLS is a TLS transport socket with sni and common.
func upstreamTLS(sni string, common obj) obj {
	return obj{"name": "envoy.transport_sockets.tls", "typed_config": obj{
		"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
		"sni":   sni, "common_tls_context": common}}
}

// socketAddress is the Envoy address of host:port.
func socketAddress(hostport string) (obj, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("%q: port is not a number 1-65535", hostport)
	}
	if host == "" {
		return nil, fmt.Errorf("%q: the host is empty", hostport)
	}
	return obj{"socket_address": obj{"address": host, "port_value": p}}, nil
}

// http2Options make a cluster speak HTTP/2 (gRPC) with the given
// http2_protocol_options.
func http2Options(h2 obj) obj {
	return obj{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": obj{
		"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
		"explicit_http_config": obj{"http2_protocol_options": h2}}}
}

// failoverDetection is the ADS cluster's outlier detection: what makes
// Envoy leave an unreachable priority for the next one (decision 054).
// Without it, a host Envoy cannot connect to stays healthy — there is no
// active health check — and every reconnect dials it again.
//
// Only local-origin failures count (split_external_local_origin_errors):
// a refused or timed-out connect, or a reset of an open stream. Two in a
// row (the stream's reset and one failed reconnect) eject the host for
// base_ejection_time, growing per ejection up to max_ejection_time; while
// it is ejected its priority has no healthy host and Envoy's next
// reconnect goes to the next priority. A gRPC status in headers (the
// standby fallback's UNAVAILABLE) is an external error and ejects
// nothing; success-rate ejection is off (one stream is not a rate). Any
// host may be ejected (max_ejection_percent 100): with every host
// ejected Envoy is in panic and tries them all. The ejection only
// decides where the next stream goes: an open stream is never moved.
func failoverDetection() obj {
	return obj{
		"split_external_local_origin_errors":         true,
		"consecutive_local_origin_failure":           2,
		"enforcing_consecutive_local_origin_failure": 100,
		"enforcing_consecutive_5xx":                  0,
		"enforcing_consecutive_gateway_failure":      0,
		"enforcing_success_rate":                     0,
		"enforcing_local_origin_success_rate":        0,
		"enforcing_failure_percentage":               0,
		"enforcing_failure_percentage_local_origin":  0,
		"interval":             "2s",
		"base_ejection_time":   "10s",
		"max_ejection_time":    "60s",
		"max_ejection_percent": 100,
	}
}

// readinessListener answers GET /ready on port from Envoy's admin (as
// Istio's 15021 listener does), and 404 to anything else.
func readinessListener(port int) obj {
	return obj{"name": ReadinessListener,
		"address": obj{"socket_address": obj{"address": "0.0.0.0", "port_value": port}},
		"filter_chains": []any{obj{"filters": []any{obj{"name": "envoy.filters.network.http_connection_manager", "typed_config": obj{
			"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
			"stat_prefix": ReadinessListener,
			"route_config": obj{"name": ReadinessListener, "virtual_hosts": []any{obj{"name": ReadinessListener, "domains": []any{"*"},
				"routes": []any{
					obj{"match": obj{"path": "/ready"}, "route": obj{"cluster": AdminCluster}},
					obj{"match": obj{"prefix": "/"}, "direct_response": obj{"status": 404}},
				}}}},
			"http_filters": []any{obj{"name": "envoy.filters.http.router", "typed_config": obj{
				"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}},
		}}}}}}
}
