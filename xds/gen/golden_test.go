package gen

import (
	"encoding/json"
	"flag"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// update rewrites the golden files instead of comparing with them:
//
//	go test ./xds/gen/ -run TestGolden -update
//
// Review the diff of testdata/golden/ before committing it.
var update = flag.Bool("update", false, "rewrite testdata/golden/ from the generators' current output")

var goldenProxies = []struct {
	name string
	key  proxy.Key
}{
	{"sidecar-shop-reviews", proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=reviews\nversion=v1", IPs: "10.1.0.1",
		Locality: mesh.ParseLocality("us-east/a")}},
	{"sidecar-web-frontend", proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", Labels: "app=frontend", IPs: "10.2.0.1",
		Locality: mesh.ParseLocality("us-east/a")}},
	{"gateway-ingress", proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.3.0.1", SDSCluster: "sds-grpc",
		Locality: mesh.ParseLocality("us-east/a")}},
	{"gateway-mesh-edge", proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=eastwestgateway", IPs: "10.3.0.2", SDSCluster: "sds-grpc",
		Locality: mesh.ParseLocality("us-east/a")}},
}

// TestGolden compares every resource generated for representative proxies
// with testdata/golden/PROXY.json.
func TestGolden(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh})
	for _, p := range goldenProxies {
		t.Run(p.name, func(t *testing.T) {
			out := Envoy(snap, p.key)
			checkGolden(t, p.name+".json", goldenJSON(t, out))
			// Route configurations come encoded by their generator: the
			// bytes are the messages' own.
			for _, r := range out.Resources[typeurl.Route] {
				if r.Wire == nil {
					t.Errorf("route configuration %s: no Resource.Wire", r.Name)
				}
				gentest.CheckWire(t, typeurl.Route, r)
			}
		})
	}
}

// checkGolden compares got with testdata/golden/name (or, with -update,
// writes it there).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	gentest.CheckGolden(t, filepath.Join("testdata", "golden", name), got, *update, "go test ./xds/gen/ -run TestGolden -update")
}

// goldenJSON renders an output as indented JSON: resources by type, in
// name order, then the problems.
func goldenJSON(t *testing.T, out *Output) []byte {
	t.Helper()
	type resource struct {
		Name     string          `json:"name"`
		Resource json.RawMessage `json:"resource"`
	}
	doc := struct {
		Resources map[string][]resource `json:"resources"`
		Problems  any                   `json:"problems"`
	}{Resources: map[string][]resource{}, Problems: out.Problems}
	for typeURL, rs := range out.Resources {
		for _, r := range rs {
			b, err := protojson.Marshal(r.Message)
			if err != nil {
				t.Fatal(err)
			}
			doc.Resources[typeURL] = append(doc.Resources[typeURL], resource{Name: r.Name, Resource: b})
		}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}
