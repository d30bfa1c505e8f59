// Package typeurl names protobuf message types as Any and xDS do:
// "type.googleapis.com/" followed by the message's full name. Every type
// URL in nave is spelled here or computed by Of. Stateless; safe for
// concurrent use.
package typeurl

import (
	"strings"

	"google.golang.org/protobuf/proto"
)

// Prefix starts every type URL.
const Prefix = "type.googleapis.com/"

// The xDS resource types nave serves.
const (
	Listener = Prefix + "envoy.config.listener.v3.Listener"
	Route    = Prefix + "envoy.config.route.v3.RouteConfiguration"
	Cluster  = Prefix + "envoy.config.cluster.v3.Cluster"
	Endpoint = Prefix + "envoy.config.endpoint.v3.ClusterLoadAssignment"
	Secret   = Prefix + "envoy.extensions.transport_sockets.tls.v3.Secret"
	// NameTable is the name table a pod's agent answers DNS from
	// (shared/nds/v1; Istio's NDS type, docs/dns.md).
	NameTable = Prefix + "istio.networking.nds.v1.NameTable"
)

// Of returns the type URL of m's message type.
func Of(m proto.Message) string {
	return Prefix + string(m.ProtoReflect().Descriptor().FullName())
}

// Short returns the last element of a type URL's name ("Cluster" for
// Cluster), for metric labels and logs.
func Short(typeURL string) string {
	return typeURL[strings.LastIndexByte(typeURL, '.')+1:]
}
