package kube

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istionetworking "istio.io/client-go/pkg/informers/externalversions/networking/v1"
	istionetworkingv1alpha3 "istio.io/client-go/pkg/informers/externalversions/networking/v1alpha3"
	istiosecurity "istio.io/client-go/pkg/informers/externalversions/security/v1"
	istiotelemetry "istio.io/client-go/pkg/informers/externalversions/telemetry/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions/apis/v1"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
)

// Names of the watched Kubernetes kinds (the Istio kinds are named by
// their meshconfig kind).
const (
	kindService       = "Service"
	kindEndpointSlice = "EndpointSlice"
	kindPod           = "Pod"
	kindNamespace     = "Namespace"
	kindNode          = "Node"
)

// kindDef describes one watched kind. The table is immutable.
type kindDef struct {
	name       string // "Service", "VirtualService"
	group      string // API group, "" for the core group
	version    string // API version
	plural     string // "virtualservices"
	namespaced bool
	// crd is set for kinds served only once their CustomResourceDefinition
	// is installed: they are looked up in discovery before being watched.
	crd bool
	// informer makes the kind's informer, watching every namespace.
	informer func(*clients) cache.SharedIndexInformer
	// transform drops what the source never reads from a cached object.
	transform cache.TransformFunc
	// sharingTransform, when set, makes the kind's transform instead:
	// one that also shares equal label maps among the cached objects,
	// through the source's table.
	sharingTransform func(*labelSets) func(obj any) (any, error)
	// same reports whether an update changed nothing the source reads;
	// nil when every update counts.
	same func(old, cur any) bool
	// mesh and spec are set for the Istio and Gateway API kinds: the
	// config kind, and the object's spec as a config spec; spec returns
	// nil, nil for an object of another type.
	mesh *meshconfig.Kind
	spec func(obj any) (proto.Message, error)
	// unsupported is set for the Gateway API kinds nave does not
	// implement: their objects are watched by metadata only, to be
	// reported (this is the reason), never published.
	unsupported string
	// newObject returns a new empty object of a Gateway API kind's Go
	// type (a *gatewayv1.HTTPRoute): how the status writer converts what
	// it reads from the API server as the source converts cached objects.
	newObject func() any
}

// clients are the API clients the informers are made with.
type clients struct {
	kube     kubernetes.Interface
	istio    istioclient.Interface
	gateway  gatewayclient.Interface
	metadata metadata.Interface
}

// resource names the kind's resource as RBAC rules and errors do:
// "pods", "endpointslices.discovery.k8s.io".
func (d *kindDef) resource() string {
	if d.group == "" {
		return d.plural
	}
	return d.plural + "." + d.group
}

// groupVersion is the kind's "group/version" as discovery names it.
func (d *kindDef) groupVersion() string {
	if d.group == "" {
		return d.version
	}
	return d.group + "/" + d.version
}

// kindDefs is the immutable table of watched kinds.
var kindDefs = []*kindDef{
	{
		name: kindNamespace, version: "v1", plural: "namespaces",
		informer: func(c *clients) cache.SharedIndexInformer {
			return coreinformers.NewNamespaceInformer(c.kube, 0, nil)
		},
		transform: transformNamespace,
		same:      sameNamespace,
	},
	{
		name: kindNode, version: "v1", plural: "nodes",
		informer: func(c *clients) cache.SharedIndexInformer {
			return coreinformers.NewNodeInformer(c.kube, 0, nil)
		},
		transform: transformNode,
		same:      sameNode,
	},
	{
		name: kindService, version: "v1", plural: "services", namespaced: true,
		informer: func(c *clients) cache.SharedIndexInformer {
			return coreinformers.NewServiceInformer(c.kube, metav1.NamespaceAll, 0, nil)
		},
		transform: transformService,
	},
	{
		name: kindEndpointSlice, group: "discovery.k8s.io", version: "v1", plural: "endpointslices", namespaced: true,
		informer: func(c *clients) cache.SharedIndexInformer {
			return discoveryinformers.NewEndpointSliceInformer(c.kube, metav1.NamespaceAll, 0, nil)
		},
		transform: transformEndpointSlice,
	},
	{
		name: kindPod, version: "v1", plural: "pods", namespaced: true,
		informer: func(c *clients) cache.SharedIndexInformer {
			return coreinformers.NewPodInformer(c.kube, metav1.NamespaceAll, 0, nil)
		},
		sharingTransform: transformPod,
		same:             samePod,
	},
	istioKind("virtualservices",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istionetworking.NewVirtualServiceInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *networkingv1.VirtualService) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("destinationrules",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istionetworking.NewDestinationRuleInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *networkingv1.DestinationRule) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("gateways",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istionetworking.NewGatewayInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *networkingv1.Gateway) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("serviceentries",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istionetworking.NewServiceEntryInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *networkingv1.ServiceEntry) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("workloadentries",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istionetworking.NewWorkloadEntryInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *networkingv1.WorkloadEntry) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("workloadgroups",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istionetworking.NewWorkloadGroupInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *networkingv1.WorkloadGroup) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("sidecars",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istionetworking.NewSidecarInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *networkingv1.Sidecar) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKindAt("v1alpha3", "envoyfilters",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istionetworkingv1alpha3.NewEnvoyFilterInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *networkingv1alpha3.EnvoyFilter) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("peerauthentications",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istiosecurity.NewPeerAuthenticationInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *securityv1.PeerAuthentication) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("requestauthentications",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istiosecurity.NewRequestAuthenticationInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *securityv1.RequestAuthentication) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("authorizationpolicies",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istiosecurity.NewAuthorizationPolicyInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *securityv1.AuthorizationPolicy) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	istioKind("telemetries",
		func(c istioclient.Interface) cache.SharedIndexInformer {
			return istiotelemetry.NewTelemetryInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *telemetryv1.Telemetry) (metav1.Object, proto.Message, proto.Message) {
			return o, &o.Spec, &o.Status
		}),
	unsupportedKind("extensions.istio.io", "v1alpha1", "WasmPlugin", "wasmplugins", meshconfig.RefusedKindReasons["WasmPlugin"]),
	unsupportedKind(meshconfig.GroupNetworking, "v1beta1", "ProxyConfig", "proxyconfigs", meshconfig.RefusedKindReasons["ProxyConfig"]),
	gatewayAPIKind("GatewayClass", "gatewayclasses",
		func(c gatewayclient.Interface) cache.SharedIndexInformer {
			return gatewayinformers.NewGatewayClassInformer(c, 0, nil)
		},
		func(o *gatewayv1.GatewayClass) (metav1.Object, any, func()) {
			return o, &o.Spec, func() { o.Status = gatewayv1.GatewayClassStatus{} }
		}),
	gatewayAPIKind("KubernetesGateway", "gateways",
		func(c gatewayclient.Interface) cache.SharedIndexInformer {
			return gatewayinformers.NewGatewayInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *gatewayv1.Gateway) (metav1.Object, any, func()) {
			return o, &o.Spec, func() { o.Status = gatewayv1.GatewayStatus{} }
		}),
	gatewayAPIKind("HTTPRoute", "httproutes",
		func(c gatewayclient.Interface) cache.SharedIndexInformer {
			return gatewayinformers.NewHTTPRouteInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *gatewayv1.HTTPRoute) (metav1.Object, any, func()) {
			return o, &o.Spec, func() { o.Status = gatewayv1.HTTPRouteStatus{} }
		}),
	gatewayAPIKind("GRPCRoute", "grpcroutes",
		func(c gatewayclient.Interface) cache.SharedIndexInformer {
			return gatewayinformers.NewGRPCRouteInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *gatewayv1.GRPCRoute) (metav1.Object, any, func()) {
			return o, &o.Spec, func() { o.Status = gatewayv1.GRPCRouteStatus{} }
		}),
	gatewayAPIKind("TCPRoute", "tcproutes",
		func(c gatewayclient.Interface) cache.SharedIndexInformer {
			return gatewayinformers.NewTCPRouteInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *gatewayv1.TCPRoute) (metav1.Object, any, func()) {
			return o, &o.Spec, func() { o.Status = gatewayv1.TCPRouteStatus{} }
		}),
	gatewayAPIKind("TLSRoute", "tlsroutes",
		func(c gatewayclient.Interface) cache.SharedIndexInformer {
			return gatewayinformers.NewTLSRouteInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *gatewayv1.TLSRoute) (metav1.Object, any, func()) {
			return o, &o.Spec, func() { o.Status = gatewayv1.TLSRouteStatus{} }
		}),
	gatewayAPIKind("ReferenceGrant", "referencegrants",
		func(c gatewayclient.Interface) cache.SharedIndexInformer {
			return gatewayinformers.NewReferenceGrantInformer(c, metav1.NamespaceAll, 0, nil)
		},
		func(o *gatewayv1.ReferenceGrant) (metav1.Object, any, func()) {
			return o, &o.Spec, func() {}
		}),
	unsupportedGatewayAPIKind("BackendTLSPolicy", "backendtlspolicies"),
	unsupportedGatewayAPIKind("ListenerSet", "listenersets"),
	unsupportedGatewayAPIKind("UDPRoute", "udproutes"),
}

// istioKind describes an Istio kind served by a CRD at version v1 of its
// group. parts returns an object's metadata, spec and status, pointing
// into the object; the spec's type decides the meshconfig kind.
func istioKind[T any](plural string, informer func(istioclient.Interface) cache.SharedIndexInformer,
	parts func(*T) (metav1.Object, proto.Message, proto.Message)) *kindDef {
	return istioKindAt("v1", plural, informer, parts)
}

// istioKindAt is istioKind for a kind served at another version.
func istioKindAt[T any](version, plural string, informer func(istioclient.Interface) cache.SharedIndexInformer,
	parts func(*T) (metav1.Object, proto.Message, proto.Message)) *kindDef {
	var zero T
	_, spec, _ := parts(&zero)
	full := string(spec.ProtoReflect().Descriptor().FullName())
	mk, ok := meshconfig.KindByTypeURL(typeurl.Prefix + full)
	if !ok {
		panic(fmt.Sprintf("kube: %s has no meshconfig kind", full))
	}
	return &kindDef{
		name: mk.Kind, group: mk.Group, version: version, plural: plural, namespaced: true, crd: true,
		informer: func(c *clients) cache.SharedIndexInformer {
			return informer(c.istio)
		},
		transform: func(obj any) (any, error) {
			if o, ok := obj.(*T); ok {
				meta, _, status := parts(o)
				trimMeta(meta)
				proto.Reset(status)
			}
			return obj, nil
		},
		mesh: mk,
		spec: func(obj any) (proto.Message, error) {
			o, ok := obj.(*T)
			if !ok {
				return nil, nil
			}
			_, spec, _ := parts(o)
			return spec, nil
		},
	}
}
