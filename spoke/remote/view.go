// Package remote keeps a spoke's view of the rest of its mesh: what the
// hub gives it on Watch (docs/protocol.md#watch) — every other cluster's
// objects and status, the mesh's trust bundle and its MeshConfig, and the
// hub's statuses of this cluster's Gateway API objects. The view is what a
// spoke in fallback serves besides its own cluster, so it is kept on disk
// (atomically, in the spoke's state dir) and loaded at start: a spoke
// restarted while the hub is gone still has it. A view on disk that does
// not verify (checksum, mesh, a resource that does not decode) is reported
// and ignored, never served.
package remote

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/xds/mesh"
)

// View is the remote part of a spoke's mesh. It is safe for concurrent
// use.
type View struct {
	mesh, cluster string

	mu sync.Mutex
	// resources holds everything held in its wire form (type URL -> name
	// -> resource), which is what is saved and what objects are decoded
	// from.
	resources map[string]map[string]held
	// objects are the other clusters' objects decoded (cluster -> "type
	// name" -> object), kept only once warm (KeepDecoded). A spoke on
	// standby holds the wire form alone, a fraction of the decoded
	// objects' memory.
	objects  map[string]map[string]*meshconfig.Object
	warm     bool
	statuses map[string]*protocolv1.ClusterStatus
	trust    *protocolv1.TrustBundle
	meshCfg  *meshv1alpha1.MeshConfig
	meshNets *meshv1alpha1.MeshNetworks
	// gwStatuses are the hub's statuses of this cluster's Gateway API
	// objects, by Watch name; onGatewayAPIStatus is told the full set.
	gwStatuses         map[string]*meshconfigv1.GatewayAPIStatus
	onGatewayAPIStatus func(statuses []*meshconfigv1.GatewayAPIStatus)
	// complete is set once a Watch stream's initial view is in (or a view
	// was loaded from disk); updated is when the view last changed.
	complete bool
	updated  time.Time
	version  uint64
	changed  chan struct{} // closed and replaced at every change
}

// Option configures a View at New; it is not used after.
type Option func(*View)

// OnGatewayAPIStatus makes the View call f with the full current set of
// the hub's statuses of this cluster's Gateway API objects (sorted by
// kind, namespace and name) each time it changes, and once the initial
// view is complete (MarkComplete), so a restarted spoke that loaded them
// from disk writes them too. f runs on the goroutine that applied the
// change, outside the View's lock; the slice is f's, the statuses shared
// (only read them).
func OnGatewayAPIStatus(f func(statuses []*meshconfigv1.GatewayAPIStatus)) Option {
	return func(v *View) { v.onGatewayAPIStatus = f }
}

// New returns an empty View for a spoke of cluster in meshName.
func New(meshName, cluster string, opts ...Option) *View {
	v := &View{mesh: meshName, cluster: cluster, resources: map[string]map[string]held{},
		objects: map[string]map[string]*meshconfig.Object{}, statuses: map[string]*protocolv1.ClusterStatus{},
		gwStatuses: map[string]*meshconfigv1.GatewayAPIStatus{}, changed: make(chan struct{})}
	for _, o := range opts {
		o(v)
	}
	return v
}

// held is one resource of the view: its version and the discovery
// Resource as the hub sent it, marshalled (protobuf).
type held struct {
	version string
	wire    []byte
}

// GatewayAPIStatuses returns the hub's statuses of this cluster's Gateway
// API objects, sorted by kind, namespace and name. The statuses are
// shared: only read them.
func (v *View) GatewayAPIStatuses() []*meshconfigv1.GatewayAPIStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.gatewayAPIStatuses()
}

// gatewayAPIStatuses is GatewayAPIStatuses with v.mu held.
func (v *View) gatewayAPIStatuses() []*meshconfigv1.GatewayAPIStatus {
	out := make([]*meshconfigv1.GatewayAPIStatus, 0, len(v.gwStatuses))
	for _, st := range v.gwStatuses {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *meshconfigv1.GatewayAPIStatus) int {
		return cmp.Or(cmp.Compare(a.GetKind(), b.GetKind()), cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return out
}

// Changed returns a channel closed at the view's next change.
func (v *View) Changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changed
}

// Held returns what the view holds, per type URL: name -> version (the
// initial versions of a Watch subscription).
func (v *View) Held() map[string]map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]map[string]string{}
	for t, byName := range v.resources {
		out[t] = map[string]string{}
		for n, h := range byName {
			out[t][n] = h.version
		}
	}
	return out
}

// Apply applies one Watch response and returns the resources it refused
// (a NACK names them); the rest apply. A removal of a name not held is
// nothing.
func (v *View) Apply(r *discoveryv3.DeltaDiscoveryResponse) []*protocolv1.Rejection {
	typeURL := r.GetTypeUrl()
	var rejections []*protocolv1.Rejection
	refuse := func(name, reason string) {
		rejections = append(rejections, &protocolv1.Rejection{TypeUrl: typeURL, Name: name, Reason: reason})
	}
	type decoded struct {
		res  *discoveryv3.Resource
		wire []byte
		decodedItem
	}
	var ok []decoded
	kind, isKind := meshconfig.KindByTypeURL(typeURL)
	if !isKind && !isWatchMessage(typeURL) {
		for _, res := range r.GetResources() {
			refuse(res.GetName(), fmt.Sprintf("type %s is not served on Watch", typeURL))
		}
		return rejections
	}
	for _, res := range r.GetResources() {
		d, err := v.decode(typeURL, kind, res)
		if err != nil {
			refuse(res.GetName(), err.Error())
			continue
		}
		wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(res)
		if err != nil {
			refuse(res.GetName(), fmt.Sprintf("cannot be kept: %v", err))
			continue
		}
		ok = append(ok, decoded{res: res, wire: wire, decodedItem: d})
	}
	v.mu.Lock()
	for _, d := range ok {
		v.put(typeURL, d.res.GetName(), held{version: d.res.GetVersion(), wire: d.wire}, d.decodedItem)
	}
	for _, name := range r.GetRemovedResources() {
		v.remove(typeURL, name)
	}
	changed := len(ok) > 0 || len(r.GetRemovedResources()) > 0
	if changed {
		v.bump()
	}
	var statuses []*meshconfigv1.GatewayAPIStatus
	notify := changed && typeURL == protocol.GatewayAPIStatusTypeURL && v.onGatewayAPIStatus != nil
	if notify {
		statuses = v.gatewayAPIStatuses()
	}
	v.mu.Unlock()
	if notify {
		v.onGatewayAPIStatus(statuses)
	}
	return rejections
}

func isWatchMessage(typeURL string) bool {
	return typeURL == protocol.ClusterStatusTypeURL || typeURL == protocol.TrustBundleTypeURL || typeURL == protocol.MeshConfigTypeURL ||
		typeURL == protocol.GatewayAPIStatusTypeURL || typeURL == protocol.MeshNetworksTypeURL
}

// decodedItem is one verified resource of the view.
type decodedItem struct {
	cluster  string
	obj      *meshconfig.Object
	status   *protocolv1.ClusterStatus
	trust    *protocolv1.TrustBundle
	meshCfg  *meshv1alpha1.MeshConfig
	meshNets *meshv1alpha1.MeshNetworks
	gw       *meshconfigv1.GatewayAPIStatus
}

// decode verifies one resource: it must decode, name another cluster of
// the spoke's mesh, and (a trust bundle, a mesh config) be of this mesh.
func (v *View) decode(typeURL string, kind *meshconfig.Kind, res *discoveryv3.Resource) (decodedItem, error) {
	switch typeURL {
	case protocol.ClusterStatusTypeURL:
		var st protocolv1.ClusterStatus
		if res.GetResource() == nil || res.GetResource().UnmarshalTo(&st) != nil {
			return decodedItem{}, fmt.Errorf("body is not a ClusterStatus")
		}
		if st.GetCluster() != res.GetName() || !validLabel(res.GetName()) {
			return decodedItem{}, fmt.Errorf("cluster status %q names cluster %q", res.GetName(), st.GetCluster())
		}
		if res.GetName() == v.cluster {
			return decodedItem{}, fmt.Errorf("cluster %q is this spoke's own", res.GetName())
		}
		if d := st.GetDomainSuffix(); d != "" {
			if err := meshconfig.CheckDomainSuffix(d); err != nil {
				return decodedItem{}, fmt.Errorf("domain suffix: %v", err)
			}
		}
		return decodedItem{cluster: res.GetName(), status: &st}, nil
	case protocol.TrustBundleTypeURL:
		var tb protocolv1.TrustBundle
		if res.GetResource() == nil || res.GetResource().UnmarshalTo(&tb) != nil {
			return decodedItem{}, fmt.Errorf("body is not a TrustBundle")
		}
		if err := protocol.CheckTrustBundle(v.mesh, res.GetName(), &tb); err != nil {
			return decodedItem{}, err
		}
		return decodedItem{trust: &tb}, nil
	case protocol.MeshConfigTypeURL:
		cfg, err := protocol.DecodeMeshConfig(v.mesh, res)
		if err != nil {
			return decodedItem{}, err
		}
		return decodedItem{meshCfg: cfg}, nil
	case protocol.MeshNetworksTypeURL:
		nw, err := protocol.DecodeMeshNetworks(v.mesh, res)
		if err != nil {
			return decodedItem{}, err
		}
		return decodedItem{meshNets: nw}, nil
	case protocol.GatewayAPIStatusTypeURL:
		st, err := protocol.DecodeGatewayAPIStatus(res)
		if err != nil {
			return decodedItem{}, err
		}
		return decodedItem{gw: st}, nil
	}
	cluster, o, err := protocol.DecodeRemote(kind, res)
	if err != nil {
		if de, ok := err.(*protocol.DecodeError); ok {
			return decodedItem{}, fmt.Errorf("%s", de.Reason)
		}
		return decodedItem{}, err
	}
	if !validLabel(cluster) {
		return decodedItem{}, fmt.Errorf("cluster %q is not a DNS label", cluster)
	}
	if cluster == v.cluster {
		return decodedItem{}, fmt.Errorf("cluster %q is this spoke's own", cluster)
	}
	return decodedItem{cluster: cluster, obj: o}, nil
}

func validLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(s)-1) {
			return false
		}
	}
	return true
}

// put stores a verified resource named name (v.mu held).
func (v *View) put(typeURL, name string, h held, d decodedItem) {
	if v.resources[typeURL] == nil {
		v.resources[typeURL] = map[string]held{}
	}
	v.remove(typeURL, name)
	v.resources[typeURL][name] = h
	switch {
	case d.status != nil:
		v.statuses[d.cluster] = d.status
	case d.trust != nil:
		v.trust = d.trust
	case d.meshCfg != nil:
		v.meshCfg = d.meshCfg
	case d.meshNets != nil:
		v.meshNets = d.meshNets
	case d.gw != nil:
		v.gwStatuses[name] = d.gw
	case d.obj != nil && v.warm:
		putObject(v.objects, typeURL, d)
	}
}

// putObject adds a decoded object to objects (cluster -> "type name" ->
// object).
func putObject(objects map[string]map[string]*meshconfig.Object, typeURL string, d decodedItem) {
	if objects[d.cluster] == nil {
		objects[d.cluster] = map[string]*meshconfig.Object{}
	}
	objects[d.cluster][typeURL+" "+d.obj.Key()] = d.obj
}

// remove drops a resource (v.mu held).
func (v *View) remove(typeURL, name string) {
	if _, ok := v.resources[typeURL][name]; !ok {
		return
	}
	delete(v.resources[typeURL], name)
	switch typeURL {
	case protocol.ClusterStatusTypeURL:
		delete(v.statuses, name)
	case protocol.TrustBundleTypeURL:
		v.trust = nil
	case protocol.MeshConfigTypeURL:
		v.meshCfg = nil
	case protocol.MeshNetworksTypeURL:
		v.meshNets = nil
	case protocol.GatewayAPIStatusTypeURL:
		delete(v.gwStatuses, name)
	default:
		if cluster, key, ok := protocol.SplitRemoteName(name); ok {
			delete(v.objects[cluster], typeURL+" "+key)
			if len(v.objects[cluster]) == 0 {
				delete(v.objects, cluster)
			}
		}
	}
}

func (v *View) bump() {
	v.version++
	v.updated = time.Now()
	close(v.changed)
	v.changed = make(chan struct{})
}

// MarkComplete records that a Watch stream's initial view is in: the view
// is a complete copy of what the hub serves the spoke.
func (v *View) MarkComplete() {
	v.mu.Lock()
	if !v.complete {
		v.complete = true
		v.bump()
	}
	statuses := v.gatewayAPIStatuses()
	v.mu.Unlock()
	if v.onGatewayAPIStatus != nil {
		v.onGatewayAPIStatus(statuses)
	}
}

// Complete reports whether the view was ever complete (a Watch stream
// reached its synced marker, or a complete view was loaded).
func (v *View) Complete() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.complete
}

// Clusters returns the remote clusters as engine input: for each other
// cluster the hub told of, its flags and DNS suffix as the hub last said
// and its objects (sorted as the hub sorts them), so that a snapshot built
// from them and the spoke's own cluster equals the hub's. Before
// KeepDecoded it decodes them for this call alone.
func (v *View) Clusters() []mesh.ClusterInput {
	v.mu.Lock()
	defer v.mu.Unlock()
	objects := v.objects
	if !v.warm {
		objects = v.decodeAll()
	}
	out := make([]mesh.ClusterInput, 0, len(v.statuses))
	for name, st := range v.statuses {
		in := mesh.ClusterInput{Name: name, Connected: st.GetConnected(), Synced: st.GetSynced(), Stale: st.GetStale(), DomainSuffix: st.GetDomainSuffix()}
		for _, o := range objects[name] {
			in.Objects = append(in.Objects, o)
		}
		slices.SortFunc(in.Objects, meshconfig.CompareObjects)
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// KeepDecoded has the view keep its objects decoded from now on, so that
// Clusters no longer decodes them: the fallback calls it when the hub is
// lost, before it serves, and then builds from the view often.
func (v *View) KeepDecoded() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.warm {
		v.objects, v.warm = v.decodeAll(), true
	}
}

// decodeAll decodes the objects held (v.mu held): cluster -> "type name"
// -> object. They were verified when they came in; one that no longer
// decodes is left out.
func (v *View) decodeAll() map[string]map[string]*meshconfig.Object {
	out := map[string]map[string]*meshconfig.Object{}
	for typeURL, byName := range v.resources {
		kind, ok := meshconfig.KindByTypeURL(typeURL)
		if !ok {
			continue
		}
		for _, h := range byName {
			var res discoveryv3.Resource
			if proto.Unmarshal(h.wire, &res) != nil {
				continue
			}
			if d, err := v.decode(typeURL, kind, &res); err == nil && d.obj != nil {
				putObject(out, typeURL, d)
			}
		}
	}
	return out
}

// Objects returns how many objects the view holds of each other cluster
// it was told of.
func (v *View) Objects() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.objectCounts()
}

// objectCounts is Objects with v.mu held.
func (v *View) objectCounts() map[string]int {
	out := make(map[string]int, len(v.statuses))
	for name := range v.statuses {
		out[name] = 0
	}
	for typeURL, byName := range v.resources {
		if _, ok := meshconfig.KindByTypeURL(typeURL); !ok {
			continue
		}
		for name := range byName {
			if cluster, _, ok := protocol.SplitRemoteName(name); ok {
				if _, told := out[cluster]; told {
					out[cluster]++
				}
			}
		}
	}
	return out
}

// Trust returns the mesh's trust bundle, nil when the hub sent none.
func (v *View) Trust() *protocolv1.TrustBundle {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.trust
}

// MeshConfig returns the mesh's Istio MeshConfig as the hub last gave it;
// nil when it gave none (Istio's defaults). The result is shared: only
// read it.
func (v *View) MeshConfig() *meshv1alpha1.MeshConfig {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.meshCfg
}

// MeshNetworks returns the mesh's Istio MeshNetworks as the hub last
// gave it; nil when it gave none. The result is shared: only read it.
func (v *View) MeshNetworks() *meshv1alpha1.MeshNetworks {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.meshNets
}

// Status is what /debug/remote shows.
type Status struct {
	Mesh     string    `json:"mesh"`
	Complete bool      `json:"complete"`
	Updated  time.Time `json:"updated"`
	Version  uint64    `json:"version"`
	Trust    bool      `json:"trustBundle"`
	// MeshConfig is the version (hash) of the mesh config held, "" for none.
	MeshConfig string `json:"meshConfig,omitempty"`
	// MeshNetworks is the version (hash) of the mesh networks held, ""
	// for none.
	MeshNetworks string         `json:"meshNetworks,omitempty"`
	Clusters     map[string]int `json:"clusters"`
	// GatewayAPIStatuses are the hub's statuses of this cluster's Gateway
	// API objects, by "Kind/namespace/name": the status JSON.
	GatewayAPIStatuses map[string]json.RawMessage `json:"gatewayAPIStatuses,omitempty"`
}

// Status reports the view's state: per remote cluster, the objects held.
func (v *View) Status() Status {
	v.mu.Lock()
	defer v.mu.Unlock()
	st := Status{Mesh: v.mesh, Complete: v.complete, Updated: v.updated, Version: v.version, Trust: v.trust != nil, Clusters: map[string]int{}}
	st.MeshConfig = v.resources[protocol.MeshConfigTypeURL][v.mesh].version
	st.MeshNetworks = v.resources[protocol.MeshNetworksTypeURL][v.mesh].version
	st.Clusters = v.objectCounts()
	for name, gs := range v.gwStatuses {
		if st.GatewayAPIStatuses == nil {
			st.GatewayAPIStatuses = map[string]json.RawMessage{}
		}
		st.GatewayAPIStatuses[name] = gs.GetJson()
	}
	return st
}
