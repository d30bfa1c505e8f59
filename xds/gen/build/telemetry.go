package build

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/mesh"
)

// Metadata keys telemetry reads from clusters and endpoints.
const (
	// IstioMetadataKey is the filter metadata Istio's stats filter reads:
	// a cluster's "services", an endpoint's "workload".
	IstioMetadataKey = "istio"
	// CSMTelemetryLabelsKey is the cluster filter metadata grpc-go's CSM
	// observability plugin reads (service_name, service_namespace).
	CSMTelemetryLabelsKey = "com.google.csm.telemetry_labels"
)

// ServiceName is a service's short name as Istio's service attributes
// name it: NAME of a Kubernetes host NAME.NAMESPACE.svc.SUFFIX, else the
// host itself (a ServiceEntry's).
func ServiceName(svc *mesh.Service) string {
	if name, rest, ok := strings.Cut(svc.Hostname, "."); ok && svc.Namespace != "" && strings.HasPrefix(rest, svc.Namespace+".svc.") {
		return name
	}
	return svc.Hostname
}

// ClusterMetadata is an outbound cluster's metadata for telemetry, as
// Istio and grpc-go's CSM observability read it: "istio" with the
// service (host, name, namespace) for Istio's stats filter, and, for
// proxyless clients (csm true), "com.google.csm.telemetry_labels" with
// service_name and service_namespace.
func ClusterMetadata(svc *mesh.Service, csm bool) *corev3.Metadata {
	name := ServiceName(svc)
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		IstioMetadataKey: {Fields: map[string]*structpb.Value{
			"services": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"host":      structpb.NewStringValue(svc.Hostname),
				"name":      structpb.NewStringValue(name),
				"namespace": structpb.NewStringValue(svc.Namespace),
			}})}}),
		}},
	}}
	if csm {
		md.FilterMetadata[CSMTelemetryLabelsKey] = &structpb.Struct{Fields: map[string]*structpb.Value{
			"service_name":      structpb.NewStringValue(name),
			"service_namespace": structpb.NewStringValue(svc.Namespace),
		}}
	}
	return md
}

// Labels a workload's canonical service and revision come from, in the
// order Istio reads them (defined in xdsbootstrap, which the injector
// shares).
var (
	CanonicalNameLabels     = xdsbootstrap.CanonicalNameLabels
	CanonicalRevisionLabels = xdsbootstrap.CanonicalRevisionLabels
)

// CanonicalService is a workload's canonical service name as Istio
// derives it from its labels, fallback when none is set.
func CanonicalService(labels map[string]string, fallback string) string {
	return xdsbootstrap.CanonicalService(labels, fallback)
}

// CanonicalRevision is a workload's canonical revision as Istio derives
// it from its labels, "latest" when none is set.
func CanonicalRevision(labels map[string]string) string {
	return xdsbootstrap.CanonicalRevision(labels)
}

// EndpointWorkload is Istio's compressed workload metadata of an
// endpoint (metadata "istio", field "workload"), which Istio's stats
// filter reads for the peer's labels when no metadata exchange happened:
// WORKLOAD;NAMESPACE;CANONICAL_SERVICE;CANONICAL_REVISION;CLUSTER, the
// revision empty when it is "latest". nave's registry does not carry the
// owning workload's (Deployment's) name: the canonical service stands in,
// and the namespace is the service's.
func EndpointWorkload(svc *mesh.Service, ep *mesh.Endpoint) string {
	name := CanonicalService(ep.Labels, ServiceName(svc))
	rev := CanonicalRevision(ep.Labels)
	if rev == "latest" {
		rev = ""
	}
	return name + ";" + svc.Namespace + ";" + name + ";" + rev + ";" + ep.Cluster
}

// WithEndpointWorkload returns md (which is not modified; nil is empty)
// with the endpoint's "istio" workload metadata added.
func WithEndpointWorkload(md *corev3.Metadata, svc *mesh.Service, ep *mesh.Endpoint) *corev3.Metadata {
	out := &corev3.Metadata{FilterMetadata: make(map[string]*structpb.Struct, len(md.GetFilterMetadata())+1)}
	for k, v := range md.GetFilterMetadata() {
		out.FilterMetadata[k] = v
	}
	out.FilterMetadata[IstioMetadataKey] = &structpb.Struct{Fields: map[string]*structpb.Value{
		"workload": structpb.NewStringValue(EndpointWorkload(svc, ep)),
	}}
	return out
}
