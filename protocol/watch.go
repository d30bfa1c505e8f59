package protocol

import (
	"fmt"
	"slices"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/shared/typeurl"
)

// TrustBundleTypeURL is the type of the mesh's roots of trust on Watch.
var TrustBundleTypeURL = typeurl.Of(&protocolv1.TrustBundle{})

// MeshConfigTypeURL is the type of the mesh's Istio MeshConfig on Watch:
// the body is istio.io/api's mesh.v1alpha1.MeshConfig itself, named by
// the mesh. Absent when the mesh has none (Istio's defaults).
var MeshConfigTypeURL = typeurl.Of(&meshv1alpha1.MeshConfig{})

// MeshNetworksTypeURL is the type of the mesh's Istio MeshNetworks on
// Watch: the body is istio.io/api's mesh.v1alpha1.MeshNetworks itself,
// named by the mesh. Absent when the mesh configures no networks.
var MeshNetworksTypeURL = typeurl.Of(&meshv1alpha1.MeshNetworks{})

// GatewayAPIStatusTypeURL is the type of the hub's statuses of the
// watching cluster's own Gateway API objects on Watch (meshconfigv1's
// GatewayAPIStatus), named GatewayAPIStatusName: what its spoke writes
// back to the API server.
var GatewayAPIStatusTypeURL = typeurl.Of(&meshconfigv1.GatewayAPIStatus{})

// GatewayAPIStatusName is the Watch name of a Gateway API status:
// "Kind/namespace/name".
func GatewayAPIStatusName(st *meshconfigv1.GatewayAPIStatus) string {
	return st.GetKind() + "/" + st.GetNamespace() + "/" + st.GetName()
}

// DecodeGatewayAPIStatus unwraps a Gateway API status received on Watch:
// its body must be a GatewayAPIStatus of a Gateway API kind, named by it.
func DecodeGatewayAPIStatus(r *discoveryv3.Resource) (*meshconfigv1.GatewayAPIStatus, error) {
	var st meshconfigv1.GatewayAPIStatus
	if r.GetResource() == nil || r.GetResource().GetTypeUrl() != GatewayAPIStatusTypeURL || r.GetResource().UnmarshalTo(&st) != nil {
		return nil, fmt.Errorf("gateway API status %q: body is not a %s", r.GetName(), GatewayAPIStatusTypeURL)
	}
	if GatewayAPIStatusName(&st) != r.GetName() {
		return nil, fmt.Errorf("gateway API status %q names %s", r.GetName(), GatewayAPIStatusName(&st))
	}
	known := false
	for _, k := range meshconfig.Kinds() {
		known = known || (k.GatewayAPI && k.Kind == st.GetKind())
	}
	if !known {
		return nil, fmt.Errorf("gateway API status %q: %q is not a Gateway API kind", r.GetName(), st.GetKind())
	}
	return &st, nil
}

// WatchTypeURLs lists every type the hub serves on Watch, in the order a
// spoke subscribes to them: the config kinds (lexical order), then
// ClusterStatus, TrustBundle, MeshConfig, GatewayAPIStatus and
// MeshNetworks. A spoke subscribes to
// SyncedTypeURL after them: the hub answers it once it has answered every
// earlier subscription, which marks the end of the initial view.
func WatchTypeURLs() []string {
	var out []string
	for _, k := range meshconfig.Kinds() {
		out = append(out, k.TypeURL)
	}
	slices.Sort(out)
	return append(out, ClusterStatusTypeURL, TrustBundleTypeURL, MeshConfigTypeURL, GatewayAPIStatusTypeURL, MeshNetworksTypeURL)
}

// RemoteName is the name of a remote cluster's object on Watch:
// "cluster/namespace/name".
func RemoteName(cluster string, o *meshconfig.Object) string { return cluster + "/" + o.Key() }

// SplitRemoteName splits a Watch resource name into its cluster and the
// object key ("namespace/name").
func SplitRemoteName(name string) (cluster, key string, ok bool) {
	cluster, key, ok = strings.Cut(name, "/")
	if !ok || cluster == "" || !strings.Contains(key, "/") {
		return "", "", false
	}
	return cluster, key, true
}

// EncodeRemote wraps cluster's object into the resource that carries it on
// Watch: Encode's, named RemoteName.
func EncodeRemote(cluster string, o *meshconfig.Object) (*discoveryv3.Resource, error) {
	r, err := Encode(o)
	if err != nil {
		return nil, err
	}
	r.Name = RemoteName(cluster, o)
	return r, nil
}

// DecodeRemote unwraps and validates one remote object received on Watch,
// returning the cluster its name attributes it to. Failures are
// *DecodeError, as Decode's.
func DecodeRemote(kind *meshconfig.Kind, r *discoveryv3.Resource) (cluster string, o *meshconfig.Object, err error) {
	cluster, key, ok := SplitRemoteName(r.GetName())
	if !ok {
		return "", nil, &DecodeError{TypeURL: kind.TypeURL, Name: r.GetName(), Reason: "name is not cluster/namespace/name"}
	}
	local := &discoveryv3.Resource{Name: key, Version: r.GetVersion(), Resource: r.GetResource()}
	o, err = DecodeKind(kind, local)
	if err != nil {
		if de, ok := err.(*DecodeError); ok {
			de.Name = r.GetName()
		}
		return "", nil, err
	}
	return cluster, o, nil
}

// CheckTrustBundle refuses a trust bundle that is not mesh's (a Watch
// response for another mesh is never accepted) or that carries no roots.
func CheckTrustBundle(mesh string, name string, b *protocolv1.TrustBundle) error {
	if name != mesh || b.GetMesh() != mesh {
		return fmt.Errorf("trust bundle %q names mesh %q, and this spoke is of mesh %q", name, b.GetMesh(), mesh)
	}
	if b.GetRootsPem() == "" {
		return fmt.Errorf("trust bundle %q has no roots", name)
	}
	return nil
}

// DecodeMeshConfig unwraps the MeshConfig resource of mesh received on
// Watch: it must be named by mesh (a MeshConfig of another mesh is never
// accepted), decode, and pass meshconfig.ValidateMeshConfig (a spoke
// applies nothing it would refuse from an operator).
func DecodeMeshConfig(mesh string, r *discoveryv3.Resource) (*meshv1alpha1.MeshConfig, error) {
	return decodeMeshMessage(mesh, r, "mesh config", MeshConfigTypeURL, &meshv1alpha1.MeshConfig{}, meshconfig.ValidateMeshConfig)
}

// decodeMeshMessage unwraps the resource of a mesh-wide message (what,
// of type typeURL) into m: named by mesh, decoding, and passing validate.
func decodeMeshMessage[M proto.Message](mesh string, r *discoveryv3.Resource, what, typeURL string, m M, validate func(M) error) (M, error) {
	var zero M
	if r.GetName() != mesh {
		return zero, fmt.Errorf("%s %q names another mesh than this spoke's %q", what, r.GetName(), mesh)
	}
	if r.GetResource() == nil || r.GetResource().GetTypeUrl() != typeURL || r.GetResource().UnmarshalTo(m) != nil {
		return zero, fmt.Errorf("%s %q: body is not a %s", what, r.GetName(), typeURL)
	}
	if err := validate(m); err != nil {
		return zero, fmt.Errorf("%s %q: %w", what, r.GetName(), err)
	}
	return m, nil
}

// DecodeMeshNetworks unwraps the MeshNetworks resource of mesh received
// on Watch: it must be named by mesh, decode, and pass
// meshconfig.ValidateMeshNetworks (a spoke applies nothing it would
// refuse from an operator).
func DecodeMeshNetworks(mesh string, r *discoveryv3.Resource) (*meshv1alpha1.MeshNetworks, error) {
	return decodeMeshMessage(mesh, r, "mesh networks", MeshNetworksTypeURL, &meshv1alpha1.MeshNetworks{}, meshconfig.ValidateMeshNetworks)
}
