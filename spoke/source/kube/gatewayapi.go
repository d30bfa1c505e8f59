package kube

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/navemesh/nave/shared/meshconfig"
)

// gatewayAPIKind describes a Gateway API kind served by a CRD at version
// v1 of gateway.networking.k8s.io; meshKind is its config kind's name.
// parts returns an object's metadata, a pointer to its spec, and a func
// clearing its status: the cache keeps no status (the status writer
// reads the object from the API server), so the source's own status
// writes are updates that change nothing it reads.
func gatewayAPIKind[T any](meshKind, plural string, informer func(gatewayclient.Interface) cache.SharedIndexInformer,
	parts func(*T) (metav1.Object, any, func())) *kindDef {
	i := slices.IndexFunc(meshconfig.Kinds(), func(k *meshconfig.Kind) bool { return k.Kind == meshKind && k.GatewayAPI })
	if i < 0 {
		panic(fmt.Sprintf("kube: %s is not a Gateway API config kind", meshKind))
	}
	mk := meshconfig.Kinds()[i]
	return &kindDef{
		name: mk.Kind, group: mk.Group, version: "v1", plural: plural, namespaced: !mk.ClusterScoped, crd: true,
		informer: func(c *clients) cache.SharedIndexInformer { return informer(c.gateway) },
		transform: func(obj any) (any, error) {
			if o, ok := obj.(*T); ok {
				meta, _, clearStatus := parts(o)
				trimMeta(meta)
				clearStatus()
			}
			return obj, nil
		},
		same:      sameGeneration,
		mesh:      mk,
		newObject: func() any { return new(T) },
		spec: func(obj any) (proto.Message, error) {
			o, ok := obj.(*T)
			if !ok {
				return nil, nil
			}
			_, spec, _ := parts(o)
			return meshconfig.WrapGatewayAPISpec(mk, spec)
		},
	}
}

// sameGeneration reports an update that changed neither the spec (the
// API server bumps a custom resource's generation on every spec change,
// and on no status change) nor the labels and annotations.
func sameGeneration(old, cur any) bool {
	a, ok1 := old.(metav1.Object)
	b, ok2 := cur.(metav1.Object)
	return ok1 && ok2 && a.GetGeneration() == b.GetGeneration() &&
		maps.Equal(a.GetLabels(), b.GetLabels()) && maps.Equal(a.GetAnnotations(), b.GetAnnotations()) &&
		a.GetDeletionTimestamp().Equal(b.GetDeletionTimestamp())
}

// unsupportedGatewayAPIKind describes a Gateway API kind nave does not
// implement (unsupportedKind).
func unsupportedGatewayAPIKind(kind, plural string) *kindDef {
	return unsupportedKind(meshconfig.GroupGatewayAPI, "v1", kind, plural,
		fmt.Sprintf("%s is not supported by nave: the object has no effect", kind))
}

// unsupportedKind describes a kind nave does not implement (a Gateway
// API kind, Istio's WasmPlugin). Its objects are watched by metadata only
// (names, nothing more: the cheapest watch there is) so that each one is
// reported as rejected with reason — at /debug/kinds, in the log and in
// nave_spoke_kube_invalid_objects — rather than silently having no
// effect.
func unsupportedKind(group, version, kind, plural, reason string) *kindDef {
	gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
	return &kindDef{
		name: kind, group: gvr.Group, version: gvr.Version, plural: plural, namespaced: true, crd: true,
		informer: func(c *clients) cache.SharedIndexInformer {
			return metadatainformer.NewFilteredMetadataInformer(c.metadata, gvr, metav1.NamespaceAll, 0, nil, nil).Informer()
		},
		transform:   transformMeta,
		same:        func(any, any) bool { return true }, // only names are read
		unsupported: reason,
	}
}

// unsupportedRejection reports one object of an unsupported kind.
func unsupportedRejection(def *kindDef, meta metav1.Object) meshconfig.Rejection {
	return meshconfig.Rejection{Kind: def.name, Namespace: meta.GetNamespace(), Name: meta.GetName(), Field: "kind", Reason: def.unsupported}
}
