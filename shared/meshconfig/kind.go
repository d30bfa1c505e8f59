package meshconfig

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/shared/typeurl"
)

// API groups of the kinds nave knows.
const (
	GroupNetworking = "networking.istio.io"
	GroupSecurity   = "security.istio.io"
	GroupTelemetry  = "telemetry.istio.io"
	GroupRegistry   = "nave.io"
	GroupGatewayAPI = "gateway.networking.k8s.io"
)

// Kind describes one config kind. Kinds come from an immutable table:
// compare them by pointer, never modify one.
type Kind struct {
	Group    string               // "networking.istio.io", "security.istio.io", "telemetry.istio.io", "nave.io"
	Kind     string               // "VirtualService"
	Versions []string             // accepted apiVersion versions, e.g. v1, v1beta1, v1alpha3 for networking
	TypeURL  string               // "type.googleapis.com/" + proto full name of the spec
	New      func() proto.Message // a new empty spec
	Registry bool                 // true for nave registry kinds (Service, Workload): not accepted from files
	// APIKind is the kind as objects name it (the "kind:" of a document,
	// the API server's kind): Kind itself, except "Gateway" for
	// KubernetesGateway, whose Kind keeps it apart from Istio's Gateway.
	APIKind string
	// GatewayAPI is set for the Gateway API kinds: the spec is the Gateway
	// API project's Go type, carried as canonical JSON in the kind's
	// wrapper message (see GatewayAPISpec).
	GatewayAPI bool
	// ClusterScoped is set for the kinds whose objects have no namespace
	// in Kubernetes (GatewayClass): in the config model they all carry
	// ClusterNamespace, whichever source they came from.
	ClusterScoped bool
	// newGo returns a new empty Gateway API spec (a pointer to its Go
	// type); nil for the protobuf kinds.
	newGo func() any
}

// String returns the kind's name, e.g. "VirtualService".
func (k *Kind) String() string { return k.Kind }

var (
	networkingVersions = []string{"v1", "v1beta1", "v1alpha3"}
	securityVersions   = []string{"v1", "v1beta1"}
	telemetryVersions  = []string{"v1", "v1alpha1"}
	registryVersions   = []string{"v1"}
	// EnvoyFilter is served by Istio at v1alpha3 only.
	envoyFilterVersions = []string{"v1alpha3"}
)

func newKind(group string, versions []string, registry bool, newSpec func() proto.Message) *Kind {
	desc := newSpec().ProtoReflect().Descriptor()
	return &Kind{
		Group:    group,
		Kind:     string(desc.Name()),
		Versions: versions,
		TypeURL:  typeurl.Prefix + string(desc.FullName()),
		New:      newSpec,
		Registry: registry,
		APIKind:  string(desc.Name()),
	}
}

// newGatewayAPIKind describes a Gateway API kind named apiKind whose spec
// travels in the wrapper message newSpec makes; kind is the config kind's
// name when it differs from apiKind ("" otherwise).
func newGatewayAPIKind(apiKind, kind string, versions []string, newSpec func() proto.Message, newGo func() any) *Kind {
	k := newKind(GroupGatewayAPI, versions, false, newSpec)
	k.Kind, k.APIKind = cmp.Or(kind, apiKind), apiKind
	k.GatewayAPI, k.newGo = true, newGo
	return k
}

// clusterScoped marks a kind cluster-scoped.
func clusterScoped(k *Kind) *Kind {
	k.ClusterScoped = true
	return k
}

// ClusterNamespace is the namespace of every object of a cluster-scoped
// kind in the config model: the files decoder gives it whatever the
// document says, and the Kubernetes source gives it to objects that have
// none, so the same GatewayClass has the same key from either source.
const ClusterNamespace = DefaultNamespace

// kinds is the immutable kind table, in the order Kinds returns it.
var kinds = []*Kind{
	newKind(GroupNetworking, networkingVersions, false, func() proto.Message { return &networkingv1alpha3.VirtualService{} }),
	newKind(GroupNetworking, networkingVersions, false, func() proto.Message { return &networkingv1alpha3.DestinationRule{} }),
	newKind(GroupNetworking, networkingVersions, false, func() proto.Message { return &networkingv1alpha3.Gateway{} }),
	newKind(GroupNetworking, networkingVersions, false, func() proto.Message { return &networkingv1alpha3.ServiceEntry{} }),
	newKind(GroupNetworking, networkingVersions, false, func() proto.Message { return &networkingv1alpha3.WorkloadEntry{} }),
	newKind(GroupNetworking, networkingVersions, false, func() proto.Message { return &networkingv1alpha3.WorkloadGroup{} }),
	newKind(GroupNetworking, networkingVersions, false, func() proto.Message { return &networkingv1alpha3.Sidecar{} }),
	newKind(GroupNetworking, envoyFilterVersions, false, func() proto.Message { return &networkingv1alpha3.EnvoyFilter{} }),
	newKind(GroupSecurity, securityVersions, false, func() proto.Message { return &securityv1beta1.PeerAuthentication{} }),
	newKind(GroupSecurity, securityVersions, false, func() proto.Message { return &securityv1beta1.RequestAuthentication{} }),
	newKind(GroupSecurity, securityVersions, false, func() proto.Message { return &securityv1beta1.AuthorizationPolicy{} }),
	newKind(GroupTelemetry, telemetryVersions, false, func() proto.Message { return &telemetryv1alpha1.Telemetry{} }),
	clusterScoped(newGatewayAPIKind("GatewayClass", "", []string{"v1", "v1beta1"},
		func() proto.Message { return &meshconfigv1.GatewayClassSpec{} }, func() any { return &gatewayv1.GatewayClassSpec{} })),
	newGatewayAPIKind("Gateway", "KubernetesGateway", []string{"v1", "v1beta1"},
		func() proto.Message { return &meshconfigv1.KubernetesGatewaySpec{} }, func() any { return &gatewayv1.GatewaySpec{} }),
	newGatewayAPIKind("HTTPRoute", "", []string{"v1", "v1beta1"},
		func() proto.Message { return &meshconfigv1.HTTPRouteSpec{} }, func() any { return &gatewayv1.HTTPRouteSpec{} }),
	newGatewayAPIKind("GRPCRoute", "", []string{"v1", "v1alpha2"},
		func() proto.Message { return &meshconfigv1.GRPCRouteSpec{} }, func() any { return &gatewayv1.GRPCRouteSpec{} }),
	newGatewayAPIKind("TCPRoute", "", []string{"v1", "v1alpha2"},
		func() proto.Message { return &meshconfigv1.TCPRouteSpec{} }, func() any { return &gatewayv1.TCPRouteSpec{} }),
	newGatewayAPIKind("TLSRoute", "", []string{"v1", "v1alpha3", "v1alpha2"},
		func() proto.Message { return &meshconfigv1.TLSRouteSpec{} }, func() any { return &gatewayv1.TLSRouteSpec{} }),
	newGatewayAPIKind("ReferenceGrant", "", []string{"v1", "v1beta1", "v1alpha2"},
		func() proto.Message { return &meshconfigv1.ReferenceGrantSpec{} }, func() any { return &gatewayv1.ReferenceGrantSpec{} }),
	newKind(GroupRegistry, registryVersions, true, func() proto.Message { return &meshconfigv1.Service{} }),
	newKind(GroupRegistry, registryVersions, true, func() proto.Message { return &meshconfigv1.Workload{} }),
}

// Kinds returns every kind in a stable order: the Istio networking kinds,
// the security kinds, Telemetry, the Gateway API kinds, then the registry kinds. The slice is the caller's.
func Kinds() []*Kind { return slices.Clone(kinds) }

// KindFor finds the kind of an object by its apiVersion ("group/version")
// and kind. The error names what is unsupported.
func KindFor(apiVersion, kind string) (*Kind, error) {
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok || group == "" || version == "" {
		return nil, fmt.Errorf("apiVersion %q is not of the form group/version", apiVersion)
	}
	groupKnown := false
	for _, k := range kinds {
		if k.Group != group {
			continue
		}
		groupKnown = true
		if k.APIKind != kind {
			continue
		}
		if !slices.Contains(k.Versions, version) {
			return nil, fmt.Errorf("apiVersion %q is not supported for %s (supported versions: %s)",
				apiVersion, kind, strings.Join(k.Versions, ", "))
		}
		return k, nil
	}
	if !groupKnown {
		return nil, fmt.Errorf("apiVersion %q is not supported (supported groups: %s, %s, %s, %s, %s)",
			apiVersion, GroupNetworking, GroupSecurity, GroupTelemetry, GroupGatewayAPI, GroupRegistry)
	}
	if kind == "" {
		return nil, fmt.Errorf("kind is missing")
	}
	return nil, fmt.Errorf("kind %q is not supported in %s", kind, group)
}

// KindByTypeURL finds a kind by the type URL of its spec.
func KindByTypeURL(typeURL string) (*Kind, bool) {
	for _, k := range kinds {
		if k.TypeURL == typeURL {
			return k, true
		}
	}
	return nil, false
}

// EndpointsOnly reports whether objects of the kind only contribute
// endpoints (WorkloadEntry, the registry's Workload): a change of them
// skips the config debounce.
func (k *Kind) EndpointsOnly() bool { return k.Kind == "WorkloadEntry" || k.Kind == "Workload" }
