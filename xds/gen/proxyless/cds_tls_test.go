package proxyless

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// mtlsConfig is echo (ports 7070 and 7071) with a DestinationRule asking
// for ISTIO_MUTUAL, SIMPLE on port 7071, and subsets that inherit it (v1),
// set their own SANs and SNI (v2) or disable TLS (v3).
const mtlsConfig = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}, {number: 7071, name: grpc-alt, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1, labels: {version: v1}}, {address: 10.0.0.2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo.demo.svc.cluster.local
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
    portLevelSettings: [{port: {number: 7071}, tls: {mode: SIMPLE, caCertificates: /etc/ca.pem}}]
  subsets:
  - {name: v1, labels: {version: v1}}
  - name: v2
    labels: {version: v2}
    trafficPolicy: {tls: {mode: ISTIO_MUTUAL, sni: v2.echo, subjectAltNames: [spiffe://cluster.local/ns/demo/sa/echo-v2]}}
  - {name: v3, labels: {version: v2}, trafficPolicy: {tls: {mode: DISABLE}}}
`

// grpcUpstreamTLSOf returns the UpstreamTlsContext of cluster name of
// out (upstreamTLS), after checking the cluster and the context validate
// and that the cluster has no transport socket matches (grpc-go NACKs
// them); nil when the cluster has no transport socket.
func grpcUpstreamTLSOf(t *testing.T, out *build.Output, name string) *tlsv3.UpstreamTlsContext {
	t.Helper()
	c, _ := gentest.ByName(out, typeurl.Cluster, name).Message.(*clusterv3.Cluster)
	if c == nil {
		t.Fatalf("no cluster %s", name)
	}
	if err := c.ValidateAll(); err != nil {
		t.Fatalf("cluster %s: %v", name, err)
	}
	if len(c.GetTransportSocketMatches()) != 0 {
		t.Errorf("cluster %s has transport socket matches", name)
	}
	ctx := gentest.UpstreamTLS(t, c)
	if err := ctx.ValidateAll(); ctx != nil && err != nil {
		t.Fatalf("cluster %s: UpstreamTlsContext: %v", name, err)
	}
	return ctx
}

// TestGRPCClusterIstioMutual: ISTIO_MUTUAL gives a proxyless cluster the
// TLS grpc-go reads (gRFC A29): identity and roots from the certificate
// provider, SANs in match_subject_alt_names (the trust domain's prefix, or
// the rule's names), per subset and port as Envoy merges policies.
func TestGRPCClusterIstioMutual(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": mtlsConfig})
	out := Generate(snap, build.Client{})

	check := func(name, wantSNI, wantSAN string, prefix bool) {
		t.Helper()
		ctx := grpcUpstreamTLSOf(t, out, name)
		if ctx == nil {
			t.Fatalf("cluster %s: no TLS", name)
		}
		common := ctx.GetCommonTlsContext()
		if id := common.GetTlsCertificateProviderInstance(); id.GetInstanceName() != CertificateProvider || id.GetCertificateName() != build.WorkloadCertSecret {
			t.Errorf("cluster %s: identity %v", name, id)
		}
		vc := common.GetValidationContext()
		if ca := vc.GetCaCertificateProviderInstance(); ca.GetInstanceName() != CertificateProvider || ca.GetCertificateName() != build.RootCASecret {
			t.Errorf("cluster %s: roots %v", name, ca)
		}
		//lint:ignore SA1019 the field grpc-go reads
		sans := vc.GetMatchSubjectAltNames()
		got := ""
		if len(sans) == 1 {
			got = sans[0].GetExact()
			if prefix {
				got = sans[0].GetPrefix()
			}
		}
		if len(sans) != 1 || got != wantSAN {
			t.Errorf("cluster %s: SAN matchers %v, want one (prefix %v) %q", name, sans, prefix, wantSAN)
		}
		if len(vc.GetMatchTypedSubjectAltNames()) != 0 || len(common.GetTlsCertificateSdsSecretConfigs()) != 0 {
			t.Errorf("cluster %s: fields grpc-go does not read are set: %v", name, ctx)
		}
		if ctx.GetSni() != wantSNI {
			t.Errorf("cluster %s: SNI %q, want %q", name, ctx.GetSni(), wantSNI)
		}
	}
	check(build.ClusterName(host, 7070, ""), "", "spiffe://cluster.local/", true)
	check(build.ClusterName(host, 7070, "v1"), "", "spiffe://cluster.local/", true)
	check(build.ClusterName(host, 7070, "v2"), "v2.echo", "spiffe://cluster.local/ns/demo/sa/echo-v2", false)
	check(build.ClusterName(host, 7071, "v2"), "v2.echo", "spiffe://cluster.local/ns/demo/sa/echo-v2", false)
	for _, name := range []string{build.ClusterName(host, 7070, "v3"), build.ClusterName(host, 7071, "v3")} {
		if ctx := grpcUpstreamTLSOf(t, out, name); ctx != nil {
			t.Errorf("cluster %s (DISABLE): TLS %v", name, ctx)
		}
	}

	// SIMPLE on port 7071 cannot be had: those clusters and their
	// endpoints are left out (never plain text), and it is reported.
	for _, name := range []string{build.ClusterName(host, 7071, ""), build.ClusterName(host, 7071, "v1")} {
		for _, typeURL := range []string{typeurl.Cluster, typeurl.Endpoint} {
			if r := gentest.ByName(out, typeURL, name); r.Message != nil {
				t.Errorf("%s %s generated; want it left out (SIMPLE)", typeURL, name)
			}
		}
	}
	reported := 0
	for _, p := range out.Problems {
		if p.Resource == "c1:DestinationRule demo/echo" && p.Field == "spec.trafficPolicy.portLevelSettings[0].tls.mode" && strings.Contains(p.Reason, "SIMPLE") {
			reported++
		}
	}
	if reported != 1 {
		t.Errorf("SIMPLE reported %d times, want once; problems: %+v", reported, out.Problems)
	}

	// Endpoint-only regeneration leaves out the same clusters.
	var want []build.Resource
	for _, r := range out.Resources[typeurl.Endpoint] {
		if strings.HasSuffix(r.Name, "|"+host) {
			want = append(want, r)
		}
	}
	got := Endpoints(snap, map[string]bool{host: true}, build.Client{})
	if len(got) != len(want) {
		t.Fatalf("GRPCEndpoints: %d assignments, full generation %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Name != want[i].Name || !proto.Equal(got[i].Message, want[i].Message) {
			t.Errorf("GRPCEndpoints: %s differs from full generation's %s", got[i].Name, want[i].Name)
		}
	}

	// The trust domain decides the SAN prefix.
	snap.TrustDomain = "example.org"
	out = Generate(snap, build.Client{})
	check(build.ClusterName(host, 7070, ""), "", "spiffe://example.org/", true)
}

// TestGRPCClusterMutualLeftOut: MUTUAL, like SIMPLE, leaves the clusters
// out; without a DestinationRule tls (no auto-mTLS for proxyless) the
// cluster is plain text.
func TestGRPCClusterMutualLeftOut(t *testing.T) {
	y := strings.Replace(mtlsConfig, "tls: {mode: SIMPLE, caCertificates: /etc/ca.pem}", "tls: {mode: MUTUAL, clientCertificate: /c.pem, privateKey: /k.pem}", 1)
	out := Generate(gentest.Snapshot(t, map[string]string{"c1": y}), build.Client{})
	if r := gentest.ByName(out, typeurl.Cluster, build.ClusterName(host, 7071, "")); r.Message != nil {
		t.Errorf("MUTUAL cluster generated")
	}
	if len(out.Problems) != 1 || !strings.Contains(out.Problems[0].Reason, "MUTUAL TLS origination is not supported") {
		t.Errorf("problems = %+v", out.Problems)
	}

	plain := Generate(gentest.Snapshot(t, map[string]string{"c1": config}), build.Client{})
	for _, r := range plain.Resources[typeurl.Cluster] {
		if ctx := grpcUpstreamTLSOf(t, plain, r.Name); ctx != nil {
			t.Errorf("cluster %s without a tls setting has TLS", r.Name)
		}
	}
}

// TestGRPCClusterServiceEntrySANs: under ISTIO_MUTUAL a proxyless client
// accepts the servers the ServiceEntry's subjectAltNames name (exact,
// where grpc-go reads them) unless the DestinationRule lists its own; a
// service listing none keeps the trust domain's prefix and the shared
// context.
func TestGRPCClusterServiceEntrySANs(t *testing.T) {
	y := strings.Replace(mtlsConfig, "  resolution: STATIC\n", "  resolution: STATIC\n  subjectAltNames: [spiffe://cluster.local/ns/demo/sa/echo, spiffe://cluster.local/ns/demo/sa/echo-canary]\n", 1) + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: plain, namespace: demo}
spec:
  hosts: [plain.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.9}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: plain, namespace: demo}
spec:
  host: plain.demo.svc.cluster.local
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
  subsets: [{name: a, labels: {x: a}}]
`
	out := Generate(gentest.Snapshot(t, map[string]string{"c1": y}), build.Client{})
	sansOf := func(name string) (exact, prefix []string) {
		t.Helper()
		ctx := grpcUpstreamTLSOf(t, out, name)
		//lint:ignore SA1019 the field grpc-go reads
		for _, m := range ctx.GetCommonTlsContext().GetValidationContext().GetMatchSubjectAltNames() {
			if m.GetExact() != "" {
				exact = append(exact, m.GetExact())
			} else {
				prefix = append(prefix, m.GetPrefix())
			}
		}
		return exact, prefix
	}
	for _, tc := range []struct {
		cluster       string
		exact, prefix []string
	}{
		{build.ClusterName(host, 7070, ""), []string{"spiffe://cluster.local/ns/demo/sa/echo", "spiffe://cluster.local/ns/demo/sa/echo-canary"}, nil},
		{build.ClusterName(host, 7070, "v1"), []string{"spiffe://cluster.local/ns/demo/sa/echo", "spiffe://cluster.local/ns/demo/sa/echo-canary"}, nil},
		{build.ClusterName(host, 7070, "v2"), []string{"spiffe://cluster.local/ns/demo/sa/echo-v2"}, nil},
		{build.ClusterName("plain.demo.svc.cluster.local", 7070, ""), nil, []string{"spiffe://cluster.local/"}},
	} {
		exact, prefix := sansOf(tc.cluster)
		if !slices.Equal(exact, tc.exact) || !slices.Equal(prefix, tc.prefix) {
			t.Errorf("%s: SANs exact %v prefix %v, want %v %v", tc.cluster, exact, prefix, tc.exact, tc.prefix)
		}
	}
	// The clusters of plain share one transport socket; echo's do not
	// take it.
	ts := func(name string) any {
		return gentest.ByName(out, typeurl.Cluster, name).Message.(*clusterv3.Cluster).GetTransportSocket()
	}
	if ts(build.ClusterName("plain.demo.svc.cluster.local", 7070, "")) != ts(build.ClusterName("plain.demo.svc.cluster.local", 7070, "a")) ||
		ts(build.ClusterName("plain.demo.svc.cluster.local", 7070, "")) == ts(build.ClusterName(host, 7070, "")) {
		t.Errorf("transport sockets shared wrongly")
	}
}
