package kube

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	extensionsv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioextensions "istio.io/client-go/pkg/informers/externalversions/extensions/v1alpha1"
	istionetworking "istio.io/client-go/pkg/informers/externalversions/networking/v1"
	istionetworkingv1alpha3 "istio.io/client-go/pkg/informers/externalversions/networking/v1alpha3"
	istiosecurity "istio.io/client-go/pkg/informers/externalversions/security/v1"
	istiotelemetry "istio.io/client-go/pkg/informers/externalversions/telemetry/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

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
	informer func(kubernetes.Interface, istioclient.Interface) cache.SharedIndexInformer
	// transform drops what the source never reads from a cached object.
	transform cache.TransformFunc
	// same reports whether an update changed nothing the source reads;
	// nil when every update counts.
	same func(old, cur any) bool
	// mesh and spec are set for the Istio kinds: the config kind, and
	// the object's metadata and spec (pointing into the object).
	mesh *meshconfig.Kind
	spec func(obj any) (metav1.Object, proto.Message, bool)
	// refused is set for the Istio kinds nave does not support but
	// watches so that no object of them goes unreported: every object is
	// rejected with this reason.
	refused string
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
		informer: func(c kubernetes.Interface, _ istioclient.Interface) cache.SharedIndexInformer {
			return coreinformers.NewNamespaceInformer(c, 0, nil)
		},
		transform: transformNamespace,
		same:      sameNamespace,
	},
	{
		name: kindNode, version: "v1", plural: "nodes",
		informer: func(c kubernetes.Interface, _ istioclient.Interface) cache.SharedIndexInformer {
			return coreinformers.NewNodeInformer(c, 0, nil)
		},
		transform: transformNode,
		same:      sameNode,
	},
	{
		name: kindService, version: "v1", plural: "services", namespaced: true,
		informer: func(c kubernetes.Interface, _ istioclient.Interface) cache.SharedIndexInformer {
			return coreinformers.NewServiceInformer(c, metav1.NamespaceAll, 0, nil)
		},
		transform: transformService,
	},
	{
		name: kindEndpointSlice, group: "discovery.k8s.io", version: "v1", plural: "endpointslices", namespaced: true,
		informer: func(c kubernetes.Interface, _ istioclient.Interface) cache.SharedIndexInformer {
			return discoveryinformers.NewEndpointSliceInformer(c, metav1.NamespaceAll, 0, nil)
		},
		transform: transformMeta,
	},
	{
		name: kindPod, version: "v1", plural: "pods", namespaced: true,
		informer: func(c kubernetes.Interface, _ istioclient.Interface) cache.SharedIndexInformer {
			return coreinformers.NewPodInformer(c, metav1.NamespaceAll, 0, nil)
		},
		transform: transformPod,
		same:      samePod,
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
	{
		name: "WasmPlugin", group: "extensions.istio.io", version: "v1alpha1", plural: "wasmplugins", namespaced: true, crd: true,
		informer: func(_ kubernetes.Interface, c istioclient.Interface) cache.SharedIndexInformer {
			return istioextensions.NewWasmPluginInformer(c, metav1.NamespaceAll, 0, nil)
		},
		transform: func(obj any) (any, error) {
			if o, ok := obj.(*extensionsv1alpha1.WasmPlugin); ok {
				trimMeta(o)
				proto.Reset(&o.Spec)
				proto.Reset(&o.Status)
			}
			return obj, nil
		},
		refused: meshconfig.RefusedKindReasons["WasmPlugin"],
	},
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
		informer: func(_ kubernetes.Interface, c istioclient.Interface) cache.SharedIndexInformer {
			return informer(c)
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
		spec: func(obj any) (metav1.Object, proto.Message, bool) {
			o, ok := obj.(*T)
			if !ok {
				return nil, nil, false
			}
			meta, spec, _ := parts(o)
			return meta, spec, true
		},
	}
}
