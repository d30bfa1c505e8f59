package remote

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

const seYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: NAME, namespace: demo}
spec:
  hosts: [NAME.demo.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`

func se(t testing.TB, name string) *meshconfig.Object {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(strings.ReplaceAll(seYAML, "NAME", name)), "test.yaml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return objs[0]
}

func remote(t testing.TB, cluster string, o *meshconfig.Object) *discoveryv3.Resource {
	t.Helper()
	r, err := protocol.EncodeRemote(cluster, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func body(t testing.TB, name string, st *protocolv1.ClusterStatus, tb *protocolv1.TrustBundle) *discoveryv3.Resource {
	t.Helper()
	var a *anypb.Any
	var err error
	if st != nil {
		a, err = anypb.New(st)
	} else {
		a, err = anypb.New(tb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &discoveryv3.Resource{Name: name, Version: "1", Resource: a}
}

// filled is a complete view of mesh m for cluster c1: c2's ServiceEntry,
// c2's status and the trust bundle.
func filled(t testing.TB) *View {
	t.Helper()
	v := New("m", "c1")
	o := se(t, "echo")
	for _, r := range []*discoveryv3.DeltaDiscoveryResponse{
		{TypeUrl: o.Kind.TypeURL, Resources: []*discoveryv3.Resource{remote(t, "c2", o)}},
		{TypeUrl: protocol.ClusterStatusTypeURL, Resources: []*discoveryv3.Resource{
			body(t, "c2", &protocolv1.ClusterStatus{Cluster: "c2", Connected: true, Synced: true, DomainSuffix: "c2.example"}, nil)}},
		{TypeUrl: protocol.TrustBundleTypeURL, Resources: []*discoveryv3.Resource{
			body(t, "m", nil, &protocolv1.TrustBundle{Mesh: "m", TrustDomain: "m.example", RootsPem: "ROOTS"})}},
	} {
		if rj := v.Apply(r); len(rj) > 0 {
			t.Fatalf("refused %v", rj)
		}
	}
	v.MarkComplete()
	return v
}

func TestApplyBuildsTheRemoteClusters(t *testing.T) {
	v := filled(t)
	cs := v.Clusters()
	if len(cs) != 1 || cs[0].Name != "c2" || cs[0].DomainSuffix != "c2.example" || !cs[0].Synced || len(cs[0].Objects) != 1 || cs[0].Objects[0].Name != "echo" {
		t.Fatalf("clusters = %+v", cs)
	}
	if v.Trust().GetRootsPem() != "ROOTS" {
		t.Fatalf("trust = %v", v.Trust())
	}
	o := se(t, "echo")
	v.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: o.Kind.TypeURL, RemovedResources: []string{"c2/demo/echo"}})
	if cs := v.Clusters(); len(cs[0].Objects) != 0 {
		t.Fatalf("after removal: %+v", cs[0].Objects)
	}
}

func TestApplyRefusesAnotherMeshAndItsOwnCluster(t *testing.T) {
	v := New("m", "c1")
	o := se(t, "echo")
	rj := v.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.TrustBundleTypeURL, Resources: []*discoveryv3.Resource{
		body(t, "other", nil, &protocolv1.TrustBundle{Mesh: "other", RootsPem: "EVIL"})}})
	if len(rj) != 1 || !strings.Contains(rj[0].GetReason(), `mesh "other"`) {
		t.Fatalf("another mesh's trust bundle: %v", rj)
	}
	rj = v.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: o.Kind.TypeURL, Resources: []*discoveryv3.Resource{
		remote(t, "c1", o), remote(t, "c2", o), {Name: "demo/echo"}}})
	if len(rj) != 2 || !strings.Contains(rj[0].GetReason(), "own") || !strings.Contains(rj[1].GetReason(), "cluster/namespace/name") {
		t.Fatalf("rejections = %v", rj)
	}
	if v.Trust() != nil {
		t.Fatal("a refused trust bundle was kept")
	}
	rj = v.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: "type.googleapis.com/google.protobuf.Empty", Resources: []*discoveryv3.Resource{{Name: "x"}}})
	if len(rj) != 1 {
		t.Fatalf("unknown type: %v", rj)
	}
}

func TestSavedViewLoadsBackAndACorruptedOneIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, File)
	v := filled(t)
	if err := v.Save(path); err != nil {
		t.Fatal(err)
	}
	back := New("m", "c1")
	if err := back.Load(path); err != nil {
		t.Fatal(err)
	}
	if !back.Complete() || len(back.Clusters()) != 1 || back.Trust().GetRootsPem() != "ROOTS" || len(back.Clusters()[0].Objects) != 1 {
		t.Fatalf("loaded %+v", back.Status())
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}

	good, _ := os.ReadFile(path)
	for name, bad := range map[string][]byte{
		"flipped byte": func() []byte { b := append([]byte(nil), good...); b[len(b)/2] ^= 1; return b }(),
		"cut short":    good[:len(good)-10],
		"empty":        {},
	} {
		os.WriteFile(path, bad, 0o600)
		v := New("m", "c1")
		err := v.Load(path)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err = %v, want one naming the file", name, err)
		}
		if v.Complete() || len(v.Clusters()) != 0 || v.Trust() != nil {
			t.Errorf("%s: a corrupted view was taken", name)
		}
	}
	os.WriteFile(path, good, 0o600)
	if err := New("other", "c1").Load(path); err == nil || !strings.Contains(err.Error(), "this spoke is other/c1") {
		t.Errorf("another mesh's view: err = %v", err)
	}
	if err := New("m", "c1").Load(filepath.Join(dir, "absent")); !errors.Is(err, ErrNoView) {
		t.Errorf("absent: err = %v", err)
	}
}

// TestSavedFileIsWhatJSONMarshalWrites: the streamed body is byte for byte
// json.Marshal's (the format the reader has always read), the saved file
// is its checksum line and it, and an empty view saves too.
func TestSavedFileIsWhatJSONMarshalWrites(t *testing.T) {
	for name, v := range map[string]*View{"filled": filled(t), "empty": New("m", "c1")} {
		s := v.snapshot()
		var body bytes.Buffer
		if err := s.writeBody(&body); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body.Bytes(), want) {
			t.Fatalf("%s: streamed body\n%s\nwant json.Marshal's\n%s", name, body.Bytes(), want)
		}
		path := filepath.Join(t.TempDir(), File)
		if err := v.Save(path); err != nil {
			t.Fatal(err)
		}
		file, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sumHex, saved, _ := bytes.Cut(file, []byte("\n"))
		sum := sha256.Sum256(saved)
		if string(sumHex) != hex.EncodeToString(sum[:]) {
			t.Fatalf("%s: checksum line %q does not match the body", name, sumHex)
		}
		var back struct {
			Resources []savedEntry `json:"resources"`
		}
		if err := json.Unmarshal(saved, &back); err != nil || len(back.Resources) != len(s.Resources) {
			t.Fatalf("%s: saved body holds %d resources (%v), want %d", name, len(back.Resources), err, len(s.Resources))
		}
	}
}

// FuzzLoad: a saved view that does not verify is refused whole, never
// panics and is never half taken.
func FuzzLoad(f *testing.F) {
	good, err := filled(f).Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("0\n{}"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		v := New("m", "c1")
		err := v.decodeFile("fuzz", b)
		if err != nil && (v.Complete() || len(v.Clusters()) > 0 || v.Trust() != nil) {
			t.Fatal("a view that failed to load was taken")
		}
	})
}

func meshConfigResource(t testing.TB, name string, cfg *meshv1alpha1.MeshConfig) *discoveryv3.Resource {
	t.Helper()
	a, err := anypb.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &discoveryv3.Resource{Name: name, Version: "v-" + cfg.GetRootNamespace(), Resource: a}
}

func TestMeshConfigIsKeptSavedAndLoadedWithTheView(t *testing.T) {
	v := filled(t)
	if v.MeshConfig() != nil {
		t.Fatal("a view the hub gave no mesh config holds one")
	}
	cfg := &meshv1alpha1.MeshConfig{RootNamespace: "mesh-root", DefaultConfig: &meshv1alpha1.ProxyConfig{
		TerminationDrainDuration: durationpb.New(7 * time.Second), ProxyMetadata: map[string]string{"ISTIO_META_DNS_CAPTURE": "true"}}}
	changed := v.Changed()
	if rj := v.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.MeshConfigTypeURL,
		Resources: []*discoveryv3.Resource{meshConfigResource(t, "m", cfg)}}); len(rj) > 0 {
		t.Fatalf("refused %v", rj)
	}
	select {
	case <-changed:
	default:
		t.Fatal("a new mesh config is not a change of the view")
	}
	if got := v.MeshConfig(); !proto.Equal(got, cfg) {
		t.Fatalf("mesh config = %v, want %v", got, cfg)
	}

	path := filepath.Join(t.TempDir(), File)
	if err := v.Save(path); err != nil {
		t.Fatal(err)
	}
	back := New("m", "c1")
	if err := back.Load(path); err != nil {
		t.Fatal(err)
	}
	if got := back.MeshConfig(); !proto.Equal(got, cfg) {
		t.Fatalf("loaded mesh config = %v, want %v", got, cfg)
	}
	if st := back.Status(); st.MeshConfig != "v-mesh-root" {
		t.Fatalf("status mesh config version %q", st.MeshConfig)
	}
	// The saved view is checksummed as a whole: a mesh config edited on
	// disk is refused with the rest.
	b, _ := os.ReadFile(path)
	edited := strings.Replace(string(b), `"format"`, `"format" `, 1)
	os.WriteFile(path, []byte(edited), 0o600)
	if err := New("m", "c1").Load(path); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("edited view: err = %v", err)
	}

	// Another mesh's config is refused; a removal goes back to defaults.
	rj := back.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.MeshConfigTypeURL,
		Resources: []*discoveryv3.Resource{meshConfigResource(t, "other", &meshv1alpha1.MeshConfig{RootNamespace: "evil"})}})
	if len(rj) != 1 || !strings.Contains(rj[0].GetReason(), "another mesh") || back.MeshConfig().GetRootNamespace() != "mesh-root" {
		t.Fatalf("another mesh's config: rejections %v, held %v", rj, back.MeshConfig())
	}
	back.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.MeshConfigTypeURL, RemovedResources: []string{"m"}})
	if back.MeshConfig() != nil {
		t.Fatalf("after removal: %v", back.MeshConfig())
	}
}

// The hub's Gateway API statuses are kept by name, handed to the
// callback as the full set at each change and at MarkComplete, and a
// status naming something else than its body is refused.
func TestGatewayAPIStatusesReachTheCallback(t *testing.T) {
	var got [][]*meshconfigv1.GatewayAPIStatus
	v := New("m", "c1", OnGatewayAPIStatus(func(s []*meshconfigv1.GatewayAPIStatus) { got = append(got, s) }))
	res := func(name string, st *meshconfigv1.GatewayAPIStatus) *discoveryv3.Resource {
		body, err := anypb.New(st)
		if err != nil {
			t.Fatal(err)
		}
		return &discoveryv3.Resource{Name: name, Version: "1", Resource: body}
	}
	gw := &meshconfigv1.GatewayAPIStatus{Kind: "KubernetesGateway", Namespace: "ns", Name: "edge", Version: "v1", Json: []byte(`{}`)}
	rt := &meshconfigv1.GatewayAPIStatus{Kind: "HTTPRoute", Namespace: "ns", Name: "web", Version: "v2", Json: []byte(`{"parents":[]}`)}
	rej := v.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.GatewayAPIStatusTypeURL, Resources: []*discoveryv3.Resource{
		res("KubernetesGateway/ns/edge", gw), res("HTTPRoute/ns/web", rt), res("HTTPRoute/ns/other", rt),
	}})
	if len(rej) != 1 || rej[0].GetName() != "HTTPRoute/ns/other" {
		t.Fatalf("rejections %v: want HTTPRoute/ns/other refused", rej)
	}
	if len(got) != 1 || len(got[0]) != 2 || got[0][0].GetKind() != "HTTPRoute" || got[0][1].GetKind() != "KubernetesGateway" {
		t.Fatalf("callback got %v: want the two statuses, sorted", got)
	}
	v.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.GatewayAPIStatusTypeURL, RemovedResources: []string{"HTTPRoute/ns/web"}})
	if len(got) != 2 || len(got[1]) != 1 {
		t.Fatalf("after a removal the callback got %v: want the one left", got)
	}
	v.MarkComplete()
	if len(got) != 3 || len(got[2]) != 1 || !proto.Equal(got[2][0], gw) {
		t.Fatalf("MarkComplete gave %v: want the full set", got)
	}
}

// TestObjectsDecodedOnlyWhenUsed: a view keeps the wire form alone until
// KeepDecoded, then keeps the objects decoded; what it reports is the
// same either way, through later changes and removals.
func TestObjectsDecodedOnlyWhenUsed(t *testing.T) {
	v := filled(t)
	o2 := se(t, "other")
	v.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: o2.Kind.TypeURL, Resources: []*discoveryv3.Resource{remote(t, "c2", o2)}})
	if len(v.objects) != 0 {
		t.Fatalf("objects decoded before any use: %v", v.objects)
	}
	if got := v.Status().Clusters["c2"]; got != 2 {
		t.Fatalf("cold view reports %d objects of c2, want 2", got)
	}
	names := func() []string {
		var out []string
		for _, c := range v.Clusters() {
			for _, o := range c.Objects {
				out = append(out, c.Name+" "+o.Key())
			}
		}
		return out
	}
	if got := strings.Join(names(), ","); got != "c2 demo/echo,c2 demo/other" {
		t.Fatalf("cold view holds %s", got)
	}
	if len(v.objects) != 0 {
		t.Fatalf("Clusters kept the objects decoded on a cold view: %v", v.objects)
	}
	v.KeepDecoded()
	if len(v.objects["c2"]) != 2 {
		t.Fatalf("KeepDecoded decoded %v, want c2's 2 objects", v.objects)
	}
	// Once warm, changes and removals keep the decoded objects current.
	o3 := se(t, "third")
	v.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: o3.Kind.TypeURL, Resources: []*discoveryv3.Resource{remote(t, "c2", o3)},
		RemovedResources: []string{protocol.RemoteName("c2", o2)}})
	if got := strings.Join(names(), ","); got != "c2 demo/echo,c2 demo/third" {
		t.Fatalf("after a change the view holds %s", got)
	}
	if got := v.Status().Clusters["c2"]; got != 2 {
		t.Fatalf("warm view reports %d objects of c2, want 2", got)
	}
}
