package gen_test

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// signatureExtra adds label readers the semantic mesh lacks: a Sidecar
// selecting by labels and a failoverPriority on a label.
const signatureExtra = `
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: narrow, namespace: web}
spec:
  workloadSelector: {labels: {tier: edge}}
  egress: [{hosts: [./*]}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: frontend-failover, namespace: web}
spec:
  host: frontend.web.svc.cluster.local
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3}
    loadBalancer: {localityLbSetting: {enabled: true, failoverPriority: [track]}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: strict-edge, namespace: web}
spec:
  selector: {matchLabels: {tier: edge}}
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: frontend-from-web, namespace: istio-system}
spec:
  selector: {matchLabels: {app: frontend}}
  rules: [{from: [{source: {namespaces: [web]}}]}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt-v1, namespace: shop}
spec:
  selector: {matchLabels: {version: v1}}
  jwtRules: [{issuer: https://issuer.example, jwks: '{"keys":[]}'}]
`

// outputDigest is a digest per resource of a generation's output.
func outputDigest(t *testing.T, out *gen.Output) map[string][32]byte {
	t.Helper()
	d := map[string][32]byte{}
	for typeURL, rs := range out.Resources {
		for _, r := range rs {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Message)
			if err != nil {
				t.Fatal(err)
			}
			d[typeURL+" "+r.Name] = sha256.Sum256(b)
		}
	}
	return d
}

// TestSignaturesCaptureWhatLabelsAndIPsContribute: proxies whose keys
// differ in labels or IPs but have equal signatures (what a cache keys on
// instead) get byte-equal config; the signatures do tell apart proxies
// that get different config.
func TestSignaturesCaptureWhatLabelsAndIPsContribute(t *testing.T) {
	objs, errs := meshconfig.DecodeYAML([]byte(semanticMesh+signatureExtra), "semantic.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})

	labelSets := []string{"", "app=productpage", "app=frontend", "app=other", "version=v1", "istio=ingressgateway",
		"tier=edge", "app=frontend,tier=edge", "track=a", "track=b", "app=productpage,version=v2"}
	ipSets := []string{"", "10.9.9.9", "10.9.9.8", "10.1.0.1", "10.2.0.1"}
	type group struct {
		key    proxy.Key
		digest map[string][32]byte
	}
	groups := map[string]group{}
	shared, distinct := 0, 0
	for _, typ := range []proxy.Type{proxy.Sidecar, proxy.Router} {
		for _, ns := range []string{"shop", "web", "istio-system"} {
			for _, labels := range labelSets {
				for _, ips := range ipSets {
					k := proxy.Key{Type: typ, Mesh: "m", Namespace: ns, Labels: labels, IPs: ips,
						Locality: mesh.Locality{Region: "us-east", Zone: "a"}}
					sig := fmt.Sprintf("%s|%s|%s|%s", typ, ns, scope.LabelSignature(snap, k), scope.InboundSignature(snap, k))
					d := outputDigest(t, gen.Envoy(snap, k))
					g, ok := groups[sig]
					if !ok {
						groups[sig] = group{k, d}
						distinct++
						continue
					}
					shared++
					if !maps.Equal(g.digest, d) {
						t.Errorf("keys %+v and %+v have equal signatures but different config", g.key, k)
					}
				}
			}
		}
	}
	if shared == 0 || distinct < 6 {
		t.Errorf("%d keys shared a signature, %d signatures: the test does not exercise both sides", shared, distinct)
	}
	// Labels that select differently must not share: the sourceLabels route.
	a := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=productpage"}
	b := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=other"}
	if scope.LabelSignature(snap, a) == scope.LabelSignature(snap, b) {
		t.Error("a sourceLabels match does not show in the label signature")
	}
	for _, labels := range []string{"tier=edge", "app=frontend", "version=v1"} {
		sel := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", Labels: labels}
		if scope.LabelSignature(snap, sel) == scope.LabelSignature(snap, proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", Labels: "app=other"}) {
			t.Errorf("labels %s, selected by a security policy, do not show in the label signature", labels)
		}
	}
	if c := (proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", Labels: "track=a"}); scope.LabelSignature(snap, c) ==
		scope.LabelSignature(snap, proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", Labels: "track=b"}) {
		t.Error("a failoverPriority label value does not show in the label signature")
	}
}
