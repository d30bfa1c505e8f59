package policy_test

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// upstreamMesh: ratings (mesh-internal; one injected endpoint, one not,
// one injected but with mTLS disabled by its workload's policy), details
// (ISTIO_MUTUAL by DestinationRule, with a subset and SANs), an external
// API, an internal DNS service, an original-destination service, a
// service whose namespace disables mTLS, and one whose DestinationRule
// disables TLS.
const upstreamMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  addresses: [10.96.0.11]
  location: MESH_INTERNAL
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
  - {address: 10.1.1.1, labels: {app: ratings, security.istio.io/tlsMode: istio}}
  - {address: 10.1.1.2, labels: {app: ratings}}
  - {address: 10.1.1.3, labels: {app: legacy, security.istio.io/tlsMode: istio}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: legacy, namespace: shop}
spec:
  selector: {matchLabels: {app: legacy}}
  mtls: {mode: DISABLE}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: details, namespace: books}
spec:
  hosts: [details.books.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.2.0.1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: details, namespace: books}
spec:
  host: details.books.svc.cluster.local
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/books/sa/details]}}
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 192.0.2.1, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.internal]
  location: MESH_INTERNAL
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: DNS
  endpoints: [{address: db1.internal, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: orig, namespace: shop}
spec:
  hosts: [orig.internal]
  location: MESH_INTERNAL
  ports: [{number: 8081, name: http, protocol: HTTP}]
  resolution: NONE
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: old, namespace: legacy}
spec:
  hosts: [old.legacy.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.3.0.1, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: legacy}
spec: {mtls: {mode: DISABLE}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: plain, namespace: shop}
spec:
  hosts: [plain.shop.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.4.0.1, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: plain, namespace: shop}
spec:
  host: plain.shop.svc.cluster.local
  trafficPolicy: {tls: {mode: DISABLE}}
`

var shopClient = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=client", IPs: "10.9.9.9"}

// TestUpstreamMTLS: which clusters originate mesh mTLS (ISTIO_MUTUAL or
// auto-mTLS), to which endpoints, with which SNI, ALPN, certificates and
// peer check.
func TestUpstreamMTLS(t *testing.T) {
	for _, td := range []string{"", "example.org"} {
		b := mesh.Builder{TrustDomain: td}
		snap := b.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: gentest.Decode(t, upstreamMesh)}})
		if td == "" {
			td = mesh.DefaultTrustDomain
		}
		out := gen.Envoy(snap, shopClient)
		gentest.ValidateDeep(t, out)
		s := envoysim.New(out.Resources)
		clusters := map[string]*clusterv3.Cluster{}
		for _, r := range out.Resources[typeurl.Cluster] {
			clusters[r.Name] = r.Message.(*clusterv3.Cluster)
		}
		for _, tc := range []struct {
			cluster string
			auto    bool   // transport socket matches (else a plain transport socket or none)
			sni     string // "" = no TLS at all
			sans    []string
		}{
			{cluster: build.ClusterName("ratings.shop.svc.cluster.local", 9080, ""), auto: true, sni: "outbound_.9080_._.ratings.shop.svc.cluster.local"},
			{cluster: build.ClusterName("db.internal", 5432, ""), auto: true, sni: "outbound_.5432_._.db.internal"},
			{cluster: build.ClusterName("details.books.svc.cluster.local", 9080, ""), sni: "outbound_.9080_._.details.books.svc.cluster.local",
				sans: []string{"spiffe://cluster.local/ns/books/sa/details"}},
			{cluster: build.ClusterName("details.books.svc.cluster.local", 9080, "v1"), sni: "outbound_.9080_.v1_.details.books.svc.cluster.local",
				sans: []string{"spiffe://cluster.local/ns/books/sa/details"}},
			{cluster: build.ClusterName("api.example.com", 80, "")},
			{cluster: build.ClusterName("orig.internal", 8081, "")},
			{cluster: build.ClusterName("old.legacy.svc.cluster.local", 80, "")},
			{cluster: build.ClusterName("plain.shop.svc.cluster.local", 80, "")},
		} {
			c := clusters[tc.cluster]
			if c == nil {
				t.Fatalf("no cluster %s", tc.cluster)
			}
			var ctx *tlsv3.UpstreamTlsContext
			switch {
			case tc.auto:
				// One match, tlsMode: istio; other endpoints get the
				// cluster's transport socket, none: plain text (decision 055).
				m := c.GetTransportSocketMatches()
				if len(m) != 1 || len(m[0].GetMatch().GetFields()) != 1 || m[0].GetMatch().GetFields()["tlsMode"].GetStringValue() != "istio" ||
					c.GetTransportSocket() != nil {
					t.Errorf("%s: transport socket matches %v, transport socket %v, want tlsMode: istio and otherwise plain text", tc.cluster, m, c.GetTransportSocket())
					continue
				}
				ctx = new(tlsv3.UpstreamTlsContext)
				if err := m[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
					t.Fatal(err)
				}
			case tc.sni != "":
				ctx = new(tlsv3.UpstreamTlsContext)
				if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
					t.Fatalf("%s: %v", tc.cluster, err)
				}
			default:
				if c.GetTransportSocket() != nil || len(c.GetTransportSocketMatches()) > 0 {
					t.Errorf("%s: originates TLS (%v %v), want plain text", tc.cluster, c.GetTransportSocket(), c.GetTransportSocketMatches())
				}
				continue
			}
			if len(c.GetTransportSocketMatches()) > 0 != tc.auto {
				t.Errorf("%s: auto-mTLS %v", tc.cluster, !tc.auto)
			}
			common := ctx.GetCommonTlsContext()
			vc := common.GetCombinedValidationContext()
			if ctx.GetSni() != tc.sni || !slices.Equal(common.GetAlpnProtocols(), []string{"istio"}) ||
				len(common.GetTlsCertificateSdsSecretConfigs()) != 1 || common.GetTlsCertificateSdsSecretConfigs()[0].GetName() != build.WorkloadCertSecret ||
				common.GetTlsCertificateSdsSecretConfigs()[0].GetSdsConfig().GetAds() == nil ||
				vc.GetValidationContextSdsSecretConfig().GetName() != build.RootCASecret || vc.GetValidationContextSdsSecretConfig().GetSdsConfig().GetAds() == nil {
				t.Errorf("%s: upstream TLS %v", tc.cluster, ctx)
			}
			sans := vc.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
			if tc.sans == nil {
				if len(sans) != 1 || sans[0].GetSanType() != tlsv3.SubjectAltNameMatcher_URI || sans[0].GetMatcher().GetPrefix() != "spiffe://"+td+"/" {
					t.Errorf("%s: peer check %v, want the trust domain %s", tc.cluster, sans, td)
				}
			} else if len(sans) != len(tc.sans) || sans[0].GetMatcher().GetExact() != tc.sans[0] {
				t.Errorf("%s: peer check %v, want %v", tc.cluster, sans, tc.sans)
			}
		}

		// Per endpoint: injected endpoints get mTLS, the others plain text,
		// and an injected workload whose own policy disables mTLS too.
		r := s.Do(envoysim.Request{IP: "10.96.0.11", Port: 9080, Authority: "ratings.shop.svc.cluster.local:9080", Path: "/", Method: "GET"})
		if r.Err != nil || len(r.Clusters) != 1 {
			t.Fatalf("route to ratings: %v %v", r.Err, r.Clusters)
		}
		want := map[string]bool{"10.1.1.1": true, "10.1.1.2": false, "10.1.1.3": false}
		for _, ep := range r.Clusters[0].Endpoints {
			ctx, err := ep.UpstreamTLS()
			if err != nil {
				t.Fatal(err)
			}
			if (ctx != nil) != want[ep.Address] {
				t.Errorf("endpoint %s: mTLS %v, want %v", ep.Address, ctx != nil, want[ep.Address])
			}
			delete(want, ep.Address)
		}
		if len(want) > 0 {
			t.Errorf("endpoints %v missing", want)
		}
		// The DNS cluster carries its endpoints inline, with their metadata.
		la := clusters[build.ClusterName("db.internal", 5432, "")].GetLoadAssignment()
		if md := la.GetEndpoints()[0].GetLbEndpoints()[0].GetMetadata(); md.GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue() != "istio" {
			t.Errorf("db.internal endpoint metadata %v", md)
		}
	}
}

// TestMTLSBetweenSidecars: what a client sidecar originates (auto-mTLS)
// is what the server's sidecar terminates: the client's ALPN selects the
// server's mTLS chain when the port is PERMISSIVE, and STRICT accepts it.
func TestMTLSBetweenSidecars(t *testing.T) {
	server := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=ratings\nsecurity.istio.io/tlsMode=istio", IPs: "10.1.1.1"}
	for _, mode := range []string{"PERMISSIVE", "STRICT"} {
		objs := gentest.Decode(t, upstreamMesh+gentest.PeerAuthentication("shop", mode))
		snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
		client := envoysim.New(gen.Envoy(snap, shopClient).Resources)
		r := client.Do(envoysim.Request{IP: "10.96.0.11", Port: 9080, Authority: "ratings:9080", Path: "/", Method: "GET"})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		var ctx *tlsv3.UpstreamTlsContext
		for _, ep := range r.Clusters[0].Endpoints {
			if ep.Address == "10.1.1.1" {
				ctx, _ = ep.UpstreamTLS()
			}
		}
		if ctx == nil {
			t.Fatalf("%s: the client does not originate mTLS to 10.1.1.1", mode)
		}
		out := gen.Envoy(snap, server)
		gentest.ValidateDeep(t, out)
		in := envoysim.New(out.Resources).Do(envoysim.Request{Inbound: true, IP: "10.1.1.1", Port: 9080, SNI: ctx.GetSni(),
			ALPN: ctx.GetCommonTlsContext().GetAlpnProtocols(), PeerCert: "spiffe://cluster.local/ns/shop/sa/client",
			Authority: "ratings:9080", Path: "/", Method: "GET", SourceIP: "10.9.9.9"})
		if in.Err != nil || in.Denied != "" || !in.TLSTerminated {
			t.Errorf("%s: server side: chain %s, denied %q, TLS terminated %v, err %v", mode, in.Chain, in.Denied, in.TLSTerminated, in.Err)
		}
		if want := map[string]string{"PERMISSIVE": "inbound|9080||mtls", "STRICT": "inbound|9080||"}[mode]; in.Chain != want {
			t.Errorf("%s: server chain %s, want %s", mode, in.Chain, want)
		}
	}
}
