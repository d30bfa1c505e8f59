package policy_test

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
)

// sanMesh: ServiceEntries listing subjectAltNames — pay (mesh-internal,
// auto-mTLS), ledger (ISTIO_MUTUAL by a DestinationRule without SANs; its
// subset "pinned" sets its own), bank (external, SIMPLE with a CA) and
// vault (external, SIMPLE without a CA, so nothing can check the SANs) —
// and notes, which lists none.
const sanMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: pay, namespace: shop}
spec:
  hosts: [pay.shop.svc.cluster.local]
  addresses: [10.96.1.1]
  location: MESH_INTERNAL
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  subjectAltNames: [spiffe://cluster.local/ns/pay/sa/api, spiffe://cluster.local/ns/pay/sa/api-canary]
  endpoints: [{address: 10.5.0.1, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger, namespace: shop}
spec:
  hosts: [ledger.shop.svc.cluster.local]
  addresses: [10.96.1.2]
  location: MESH_INTERNAL
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  subjectAltNames: [spiffe://cluster.local/ns/ledger/sa/ledger]
  endpoints: [{address: 10.5.0.2, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ledger, namespace: shop}
spec:
  host: ledger.shop.svc.cluster.local
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
  subsets:
  - name: pinned
    labels: {version: v1}
    trafficPolicy: {tls: {mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/ledger/sa/ledger-v1]}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bank, namespace: shop}
spec:
  hosts: [api.bank.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  subjectAltNames: [api.bank.example]
  endpoints: [{address: 192.0.2.10}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: bank, namespace: shop}
spec:
  host: api.bank.example
  trafficPolicy: {tls: {mode: SIMPLE, caCertificates: /etc/certs/bank-ca.pem}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vault, namespace: shop}
spec:
  hosts: [vault.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  subjectAltNames: [vault.example]
  endpoints: [{address: 192.0.2.11}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: vault, namespace: shop}
spec:
  host: vault.example
  trafficPolicy: {tls: {mode: SIMPLE}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: notes, namespace: shop}
spec:
  hosts: [notes.shop.svc.cluster.local]
  addresses: [10.96.1.3]
  location: MESH_INTERNAL
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.5.0.3, labels: {security.istio.io/tlsMode: istio}}]
`

// TestServiceEntrySubjectAltNames: a client sidecar accepts only the
// servers a ServiceEntry's subjectAltNames name, under auto-mTLS,
// ISTIO_MUTUAL and SIMPLE alike, unless the DestinationRule lists its own.
func TestServiceEntrySubjectAltNames(t *testing.T) {
	snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: gentest.Decode(t, sanMesh)}})
	out := gen.Envoy(snap, shopClient)
	gentest.ValidateDeep(t, out)
	s := envoysim.New(out.Resources)
	for _, tc := range []struct {
		name      string
		req       envoysim.Request
		server    string
		accepted  bool
		plainText bool
	}{
		{"auto-mTLS: a listed identity", outHTTP("10.96.1.1", "pay.shop.svc.cluster.local:8080"), "spiffe://cluster.local/ns/pay/sa/api-canary", true, false},
		{"auto-mTLS: another identity of the trust domain", outHTTP("10.96.1.1", "pay.shop.svc.cluster.local:8080"), "spiffe://cluster.local/ns/pay/sa/other", false, false},
		{"ISTIO_MUTUAL without SANs: the ServiceEntry's", outHTTP("10.96.1.2", "ledger.shop.svc.cluster.local:8080"), "spiffe://cluster.local/ns/ledger/sa/ledger", true, false},
		{"ISTIO_MUTUAL without SANs: not the subset's", outHTTP("10.96.1.2", "ledger.shop.svc.cluster.local:8080"), "spiffe://cluster.local/ns/ledger/sa/ledger-v1", false, false},
		{"SIMPLE with a CA: the ServiceEntry's DNS name", outHTTP("192.0.2.10", "api.bank.example"), "api.bank.example", true, false},
		{"SIMPLE with a CA: another name", outHTTP("192.0.2.10", "api.bank.example"), "evil.example", false, false},
		{"SIMPLE without a CA: no SAN check", outHTTP("192.0.2.11", "vault.example"), "evil.example", true, false},
		{"no SANs listed: the trust domain", outHTTP("10.96.1.3", "notes.shop.svc.cluster.local:8080"), "spiffe://cluster.local/ns/any/sa/any", true, false},
		{"no SANs listed: not another trust domain", outHTTP("10.96.1.3", "notes.shop.svc.cluster.local:8080"), "spiffe://other.example/ns/any/sa/any", false, false},
	} {
		r := s.Do(tc.req)
		if r.Err != nil || len(r.Clusters) != 1 || len(r.Clusters[0].Endpoints) != 1 {
			t.Errorf("%s: %v %v", tc.name, r.Err, r.Clusters)
			continue
		}
		ok, err := r.Clusters[0].Endpoints[0].AcceptsServer(tc.server)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if ok != tc.accepted {
			t.Errorf("%s: server %s accepted %v, want %v", tc.name, tc.server, ok, tc.accepted)
		}
	}

	// The subset's own SANs replace the ServiceEntry's.
	c, _ := gentest.ByName(out, typeurl.Cluster, "outbound|8080|pinned|ledger.shop.svc.cluster.local").Message.(*clusterv3.Cluster)
	if c == nil {
		t.Fatal("no cluster for the pinned subset")
	}
	pinned := gentest.UpstreamTLS(t, c)
	sans := pinned.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
	if len(sans) != 1 || sans[0].GetMatcher().GetExact() != "spiffe://cluster.local/ns/ledger/sa/ledger-v1" {
		t.Errorf("pinned subset SANs %v", sans)
	}
	// The SANs nothing can check are reported.
	found := false
	for _, p := range out.Problems {
		found = found || (p.Resource == "c1:DestinationRule shop/vault" && p.Field == "spec.trafficPolicy.tls.subjectAltNames" &&
			strings.Contains(p.Reason, "ServiceEntry's subjectAltNames"))
	}
	if !found {
		t.Errorf("vault's unchecked SANs not reported: %+v", out.Problems)
	}
}

func outHTTP(ip, authority string) envoysim.Request {
	return envoysim.Request{IP: ip, Port: portOf(authority), Authority: authority, Path: "/", Method: "GET"}
}

func portOf(authority string) uint32 {
	if strings.HasSuffix(authority, ":8080") {
		return 8080
	}
	return 80
}
