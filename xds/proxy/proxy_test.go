package proxy

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/xds/mesh"
)

func node(t testing.TB, id, metadataJSON string) *corev3.Node {
	t.Helper()
	n := &corev3.Node{Id: id}
	if metadataJSON != "" {
		n.Metadata = &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(metadataJSON), n.Metadata); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func TestFromNode(t *testing.T) {
	for _, tc := range []struct {
		name, id, md string
		want         Proxy
		err          string
	}{
		{name: "sidecar from id", id: "sidecar~10.1.2.3~reviews-v1-abc.shop~shop.svc.cluster.local",
			md:   `{"LABELS": {"app": "reviews", "version": "v1"}, "SERVICE_ACCOUNT": "reviews", "MESH": "m1"}`,
			want: Proxy{Type: Sidecar, Mesh: "m1", Namespace: "shop", Name: "reviews-v1-abc", IPs: []string{"10.1.2.3"}, ServiceAccount: "reviews"}},
		{name: "router", id: "router~10.0.0.9~ingress-1.istio-system~istio-system.svc.cluster.local",
			want: Proxy{Type: Router, Mesh: "default", Namespace: "istio-system", Name: "ingress-1", IPs: []string{"10.0.0.9"}}},
		{name: "instance IPs override the id's", id: "sidecar~10.1.2.3~a.ns~ns.svc.cluster.local",
			md:   `{"INSTANCE_IPS": "10.1.2.3,fd00::3"}`,
			want: Proxy{Type: Sidecar, Mesh: "default", Namespace: "ns", Name: "a", IPs: []string{"10.1.2.3", "fd00::3"}}},
		{name: "proxyless by id", id: "demo-client.demo", md: `{"NAMESPACE": "demo"}`,
			want: Proxy{Type: GRPC, Mesh: "default", Namespace: "demo"}},
		{name: "proxyless by generator", id: "sidecar~10.1.2.3~a.ns~ns.svc.cluster.local", md: `{"GENERATOR": "grpc"}`,
			want: Proxy{Type: GRPC, Mesh: "default", Namespace: "ns", Name: "a", IPs: []string{"10.1.2.3"}}},
		{name: "secrets from a local agent", id: "sidecar~10.1.2.3~a.ns~ns.svc.cluster.local", md: `{"SDS_CLUSTER": "sds-grpc"}`,
			want: Proxy{Type: Sidecar, Mesh: "default", Namespace: "ns", Name: "a", IPs: []string{"10.1.2.3"}, SDSCluster: "sds-grpc"}},
		{name: "sds cluster not a string", id: "x", md: `{"SDS_CLUSTER": true}`, err: "node.metadata.SDS_CLUSTER must be a string"},
		{name: "no id", id: "", err: "node.id is required"},
		{name: "bad ip in id", id: "sidecar~not-an-ip~a.ns~d", err: `"not-an-ip" is not an IP address`},
		{name: "bad instance ip", id: "sidecar~~a.ns~d", md: `{"INSTANCE_IPS": "10.0.0.1,x"}`, err: `INSTANCE_IPS: "x" is not an IP address`},
		{name: "namespace disagreement", id: "sidecar~10.0.0.1~a.ns~d", md: `{"NAMESPACE": "other"}`, err: `names namespace "ns" but node.metadata.NAMESPACE is "other"`},
		{name: "sidecar without namespace", id: "sidecar~10.0.0.1~a~d", err: "needs a namespace"},
		{name: "mesh not a string", id: "x", md: `{"MESH": 3}`, err: "node.metadata.MESH must be a string"},
		{name: "empty mesh", id: "x", md: `{"MESH": ""}`, err: "MESH must be a non-empty string"},
		{name: "labels not a struct", id: "x", md: `{"LABELS": "app=x"}`, err: "LABELS must be a struct of strings"},
		{name: "label not a string", id: "x", md: `{"LABELS": {"app": 1}}`, err: "node.metadata.LABELS.app must be a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := FromNode(node(t, tc.id, tc.md), "default")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Type != tc.want.Type || p.Mesh != tc.want.Mesh || p.Namespace != tc.want.Namespace || p.Name != tc.want.Name ||
				strings.Join(p.IPs, ",") != strings.Join(tc.want.IPs, ",") || p.ServiceAccount != tc.want.ServiceAccount ||
				p.SDSCluster != tc.want.SDSCluster || p.Key().SDSCluster != tc.want.SDSCluster {
				t.Fatalf("got %+v, want %+v", *p, tc.want)
			}
		})
	}
}

func TestKeyIsCanonical(t *testing.T) {
	a := &Proxy{Type: Sidecar, Namespace: "ns", Labels: map[string]string{"b": "2", "a": "1"}, IPs: []string{"10.0.0.2", "10.0.0.1"},
		Locality: mesh.Locality{Region: "r"}}
	b := &Proxy{Type: Sidecar, Namespace: "ns", Labels: map[string]string{"a": "1", "b": "2"}, IPs: []string{"10.0.0.1", "10.0.0.2"},
		Locality: mesh.Locality{Region: "r"}, ID: "another id", Name: "another pod"}
	if a.Key() != b.Key() {
		t.Fatalf("keys differ: %+v vs %+v", a.Key(), b.Key())
	}
	k := a.Key()
	if got := k.LabelMap(); len(got) != 2 || got["a"] != "1" || got["b"] != "2" {
		t.Fatalf("LabelMap = %v", got)
	}
	if got := k.IPList(); len(got) != 2 || got[0] != "10.0.0.1" {
		t.Fatalf("IPList = %v", got)
	}
	c := *b
	c.Labels = map[string]string{"a": "1"}
	if c.Key() == a.Key() {
		t.Fatal("different labels gave equal keys")
	}
}

// FuzzFromNode feeds arbitrary ids and metadata: FromNode must return a
// proxy or an error, never panic, and a proxy it returns must be usable.
func FuzzFromNode(f *testing.F) {
	f.Add("sidecar~10.1.2.3~a.ns~ns.svc.cluster.local", `{"LABELS": {"app": "a"}, "MESH": "m"}`)
	f.Add("router~~gw.istio-system~d", `{"INSTANCE_IPS": "10.0.0.1,::1"}`)
	f.Add("client", `{"MESH": 1}`)
	f.Add("sidecar~~~", `{}`)
	f.Fuzz(func(t *testing.T, id, md string) {
		n := &corev3.Node{Id: id, Metadata: &structpb.Struct{}}
		if protojson.Unmarshal([]byte(md), n.Metadata) != nil {
			n.Metadata = nil
		}
		p, err := FromNode(n, "default")
		if err != nil {
			return
		}
		if p.Mesh == "" || p.ID == "" || (p.Type != GRPC && p.Namespace == "") {
			t.Fatalf("accepted an unusable proxy: %+v", *p)
		}
		_ = p.Key().LabelMap()
	})
}

// TestIstioBuild: a node naming ISTIO_VERSION is Istio's Envoy build, and
// its key differs from an upstream Envoy's with otherwise equal fields
// (decision 039: only Istio's build gets Istio's filters).
func TestIstioBuild(t *testing.T) {
	istio, err := FromNode(node(t, "sidecar~10.0.0.1~p.ns~ns.svc.cluster.local", `{"ISTIO_VERSION": "1.31.1"}`), "m")
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := FromNode(node(t, "sidecar~10.0.0.1~p.ns~ns.svc.cluster.local", `{}`), "m")
	if err != nil {
		t.Fatal(err)
	}
	if istio.IstioVersion != "1.31.1" || !istio.Key().IstioBuild || upstream.Key().IstioBuild {
		t.Fatalf("IstioBuild: istio %+v, upstream %+v", istio.Key(), upstream.Key())
	}
	if istio.Key() == upstream.Key() {
		t.Fatal("Istio's build and upstream Envoy share a key")
	}
	if _, err := FromNode(node(t, "sidecar~10.0.0.1~p.ns~ns.svc.cluster.local", `{"ISTIO_VERSION": 1}`), "m"); err == nil {
		t.Fatal("a non-string ISTIO_VERSION was accepted")
	}
}

// TestDNSMetadata: DNS_CAPTURE and DNS_AUTO_ALLOCATE are Istio's boolean
// strings; the key carries the capture; anything else is refused naming
// the key; IPFamilies reads the instance IPs (IPv4 when none).
func TestDNSMetadata(t *testing.T) {
	const id = "sidecar~10.1.2.3~a.ns~ns.svc.cluster.local"
	p, err := FromNode(node(t, id, `{"DNS_CAPTURE": "true", "DNS_AUTO_ALLOCATE": "1"}`), "m")
	if err != nil || !p.DNSCapture || !p.DNSAutoAllocate || !p.Key().DNSCapture {
		t.Fatalf("capture and auto-allocate: %+v, %v", p, err)
	}
	p, err = FromNode(node(t, id, `{"DNS_CAPTURE": "false"}`), "m")
	if err != nil || p.DNSCapture || p.Key().DNSCapture {
		t.Fatalf("DNS_CAPTURE false: %+v, %v", p, err)
	}
	if _, err := FromNode(node(t, id, `{"DNS_CAPTURE": "yes please"}`), "m"); err == nil || !strings.Contains(err.Error(), "DNS_CAPTURE") {
		t.Errorf("an unparsable DNS_CAPTURE: %v, want an error naming it", err)
	}
	for ips, want := range map[string][2]bool{"": {true, false}, "10.0.0.1": {true, false}, "fd00::1": {false, true}, "10.0.0.1,fd00::1": {true, true}} {
		if v4, v6 := (Key{IPs: ips}).IPFamilies(); v4 != want[0] || v6 != want[1] {
			t.Errorf("IPFamilies of %q = %v, %v; want %v", ips, v4, v6, want)
		}
	}
}
