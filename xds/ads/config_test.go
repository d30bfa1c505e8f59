package ads_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
)

// ProxyConfig shows what a connected proxy would be sent, by name (its
// connection ID, node ID or a unique part of it), filtered by type.
func TestProxyConfigIsWhatTheProxyGets(t *testing.T) {
	f := newFixture(t, nil)
	objs, errs := meshconfig.DecodeYAML([]byte(envoyMesh), "mesh.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	f.set(t, "m", synced("c1", objs))
	const nodeID = "sidecar~10.9.0.1~client-1.shop~shop.svc.cluster.local"
	p := f.connect(t, envoyNode(nodeID, map[string]string{"app": "client"}))
	p.Subscribe(typeurl.Cluster)
	cds := p.Next(typeurl.Cluster)
	sent := resourcesOf(t, cds, func() *clusterv3.Cluster { return new(clusterv3.Cluster) })

	id := f.connStatus(t, nodeID).ID
	for _, name := range []string{id, nodeID, "client-1.shop"} {
		pc, err := f.ads.ProxyConfig(name, nil, "Cluster")
		if err != nil {
			t.Fatalf("ProxyConfig(%q): %v", name, err)
		}
		if pc.ID != id || pc.Mesh != "m" || len(pc.Resources) != 1 {
			t.Fatalf("ProxyConfig(%q) = %s %s with types %v; want %s of mesh m, clusters only", name, pc.ID, pc.Mesh, keys(pc.Resources), id)
		}
		got := map[string]bool{}
		for _, raw := range pc.Resources["Cluster"] {
			var c struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatal(err)
			}
			got[c.Name] = true
		}
		if len(got) != len(sent) {
			t.Errorf("ProxyConfig(%q) lists clusters %v, the proxy was sent %v", name, got, sent)
		}
		for n := range sent {
			if !got[n] {
				t.Errorf("ProxyConfig(%q) lacks cluster %s", name, n)
			}
		}
	}
	all, err := f.ads.ProxyConfig(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Cluster", "Listener", "RouteConfiguration"} {
		if len(all.Resources[want]) == 0 {
			t.Errorf("ProxyConfig without a type filter lacks %s: has %v", want, keys(all.Resources))
		}
	}
	// A caller that may not see mesh m finds none of its proxies.
	otherMesh := func(mesh string) bool { return mesh != "m" }
	for _, name := range []string{id, nodeID, "client-1"} {
		if _, err := f.ads.ProxyConfig(name, otherMesh); !errors.Is(err, ads.ErrNoProxy) {
			t.Errorf("ProxyConfig(%q) for a caller not seeing mesh m: %v, want ErrNoProxy", name, err)
		}
	}
	if _, err := f.ads.ProxyConfig("nobody", nil); !errors.Is(err, ads.ErrNoProxy) {
		t.Errorf("ProxyConfig of an unknown proxy: %v, want ErrNoProxy", err)
	}
	p2 := f.connect(t, envoyNode("sidecar~10.9.0.2~client-2.shop~shop.svc.cluster.local", map[string]string{"app": "client"}))
	p2.Subscribe(typeurl.Cluster)
	p2.Next(typeurl.Cluster)
	if _, err := f.ads.ProxyConfig(".shop~", nil); err == nil || !strings.Contains(err.Error(), "names 2 connected proxies") {
		t.Errorf("ProxyConfig of a part of two node IDs: %v, want an error naming both", err)
	}
}

// Secrets are shown as minted for the stream, without the private key.
func TestProxyConfigSecretsHaveNoPrivateKey(t *testing.T) {
	m := &minter{renewAfter: 1 << 40}
	f := newFixture(t, nil, func(o *ads.Options) { o.Authenticator = metadataAuthenticator(); o.Secrets = m })
	f.set(t, "m", synced("c1", nil))
	const nodeID = "sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local"
	p := f.connect(t, workloadNode(nodeID, "", "", ""), withIdentity("m/shop/cart"))
	p.Subscribe(typeurl.Cluster)
	p.Next(typeurl.Cluster)
	if pc, err := f.ads.ProxyConfig(nodeID, nil, "Secret"); err != nil || len(pc.Resources["Secret"]) != 0 {
		t.Fatalf("secrets before any were minted: %v, %v; want none", pc, err)
	}
	p.Subscribe(typeurl.Secret, "default", "ROOTCA")
	p.Next(typeurl.Secret)
	pc, err := f.ads.ProxyConfig(nodeID, nil, "Secret")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(pc)
	if len(pc.Resources["Secret"]) != 2 || !strings.Contains(string(body), `"certificateChain"`) || !strings.Contains(string(body), `"trustedCa"`) {
		t.Fatalf("secrets view %s; want default's chain and ROOTCA's roots", body)
	}
	if strings.Contains(string(body), "privateKey") || strings.Contains(string(body), "a2V5ICMx") { // base64 "key #1"
		t.Errorf("the secrets view holds the private key: %s", body)
	}
}
