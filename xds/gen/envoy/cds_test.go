package envoy

import (
	"math"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

const cdsReviews = "reviews.demo.svc.cluster.local"

// reviewsConfig is a STATIC service with HTTP, GRPC and TCP ports and
// endpoints in three localities; a test appends a DestinationRule.
const reviewsConfig = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: demo}
spec:
  hosts: [reviews.demo.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {number: 9080, name: http, protocol: HTTP}
  - {number: 7070, name: grpc, protocol: GRPC}
  - {number: 3306, name: tcp, protocol: TCP, targetPort: 13306}
  endpoints:
  - {address: 10.0.0.1, labels: {version: v1}, locality: us-east/zone-a, weight: 2, ports: {http: 19080}}
  - {address: 10.0.0.2, labels: {version: v2}, locality: us-east/zone-b}
  - {address: 10.0.0.3, labels: {version: v2}, locality: us-west/zone-a}
  - {address: 10.0.0.4, labels: {version: v1}, locality: eu/zone-a}
`

func sidecarKey(ns string, loc mesh.Locality) proxy.Key {
	return proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: ns, IPs: "10.9.9.9", Locality: loc}
}

// envoyOut generates for one cluster's YAML and checks every resource
// validates.
func envoyOut(t *testing.T, y string, key proxy.Key) *build.Output {
	t.Helper()
	out := generate(gentest.Snapshot(t, map[string]string{"c1": y}), key)
	gentest.ValidateAll(t, out)
	return out
}

func clusterOf(t *testing.T, out *build.Output, name string) *clusterv3.Cluster {
	t.Helper()
	c, _ := gentest.ByName(out, typeurl.Cluster, name).Message.(*clusterv3.Cluster)
	if c == nil {
		t.Fatalf("no cluster %s; have %v", name, gentest.Names(out.Resources[typeurl.Cluster]))
	}
	return c
}

func hasProblem(out *build.Output, field, reason string) bool {
	for _, p := range out.Problems {
		if strings.Contains(p.Field, field) && strings.Contains(p.Reason, reason) {
			return true
		}
	}
	return false
}

func httpOptions(t *testing.T, c *clusterv3.Cluster) *upstreamhttpv3.HttpProtocolOptions {
	t.Helper()
	a := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsName]
	if a == nil {
		return nil
	}
	var o upstreamhttpv3.HttpProtocolOptions
	if err := a.UnmarshalTo(&o); err != nil {
		t.Fatal(err)
	}
	return &o
}

func dr(spec string) string {
	return "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: demo}\nspec:\n  host: reviews\n" + spec
}

func TestEnvoyClusterPolicies(t *testing.T) {
	http := build.ClusterName(cdsReviews, 9080, "")
	grpc := build.ClusterName(cdsReviews, 7070, "")
	tcp := build.ClusterName(cdsReviews, 3306, "")
	tests := []struct {
		name   string
		dr     string
		router bool
		agent  string // the node's SDS_CLUSTER
		check  func(t *testing.T, out *build.Output)
	}{
		{name: "defaults without a DestinationRule", check: func(t *testing.T, out *build.Output) {
			c := clusterOf(t, out, http)
			// No service_name: Envoy subscribes to the cluster's name
			// (decision 055).
			if c.GetType() != clusterv3.Cluster_EDS || c.GetEdsClusterConfig().GetServiceName() != "" ||
				c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil || c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST {
				t.Errorf("http cluster = %v, want Istio's default LEAST_REQUEST, EDS by the cluster's name", c)
			}
			if c.GetConnectTimeout().AsDuration().Seconds() != 10 {
				t.Errorf("connect timeout = %v", c.GetConnectTimeout())
			}
			th := c.GetCircuitBreakers().GetThresholds()[0]
			if th.GetMaxConnections().GetValue() != math.MaxUint32 || th.GetMaxRequests().GetValue() != math.MaxUint32 || th.GetMaxRetries().GetValue() != math.MaxUint32 {
				t.Errorf("default thresholds = %v", th)
			}
			if httpOptions(t, c) != nil || gentest.UpstreamTLS(t, c) != nil || c.GetOutlierDetection() != nil {
				t.Errorf("plain HTTP cluster has protocol options, TLS or outlier detection: %v", c)
			}
			if o := httpOptions(t, clusterOf(t, out, grpc)); o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
				t.Errorf("GRPC port: protocol options = %v, want explicit HTTP/2", o)
			}
			if httpOptions(t, clusterOf(t, out, tcp)) != nil {
				t.Errorf("TCP port has HTTP protocol options")
			}
			if n := len(out.Resources[typeurl.Endpoint]); n != 3 {
				t.Errorf("EDS resources = %d, want one per port", n)
			}
		}},
		{name: "subsets", dr: `  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`, check: func(t *testing.T, out *build.Output) {
			for _, p := range []uint32{9080, 7070, 3306} {
				for _, ss := range []string{"", "v1", "v2"} {
					clusterOf(t, out, build.ClusterName(cdsReviews, p, ss))
					if gentest.ByName(out, typeurl.Endpoint, build.ClusterName(cdsReviews, p, ss)).Message == nil {
						t.Errorf("no EDS for %s", build.ClusterName(cdsReviews, p, ss))
					}
				}
			}
		}},
		{name: "least request with warmup", dr: `  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST, warmupDurationSecs: 30s}
`, check: func(t *testing.T, out *build.Output) {
			c := clusterOf(t, out, http)
			if c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST || c.GetLeastRequestLbConfig().GetSlowStartConfig().GetSlowStartWindow().AsDuration().Seconds() != 30 {
				t.Errorf("cluster = %v", c)
			}
		}},
		{name: "warmup without a policy: least request, as Istio's default", dr: `  trafficPolicy:
    loadBalancer: {warmupDurationSecs: 20s}
`, check: func(t *testing.T, out *build.Output) {
			c := clusterOf(t, out, http)
			if c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST || c.GetLeastRequestLbConfig().GetSlowStartConfig().GetSlowStartWindow().AsDuration().Seconds() != 20 {
				t.Errorf("cluster = %v", c)
			}
		}},
		{name: "round robin warmup with aggression", dr: `  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN, warmup: {duration: 10s, aggression: 2, minimumPercent: 5}}
`, check: func(t *testing.T, out *build.Output) {
			ss := clusterOf(t, out, http).GetRoundRobinLbConfig().GetSlowStartConfig()
			if ss.GetSlowStartWindow().AsDuration().Seconds() != 10 || ss.GetAggression().GetDefaultValue() != 2 || ss.GetMinWeightPercent().GetValue() != 5 {
				t.Errorf("slow start = %v", ss)
			}
		}},
		{name: "random, subset overrides, port level wins, warmup reported", dr: `  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
    portLevelSettings:
    - port: {number: 7070}
      loadBalancer: {simple: RANDOM, warmupDurationSecs: 5s}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 2048}}}}
`, check: func(t *testing.T, out *build.Output) {
			if p := clusterOf(t, out, http).GetLbPolicy(); p != clusterv3.Cluster_LEAST_REQUEST {
				t.Errorf("http lb = %v", p)
			}
			if p := clusterOf(t, out, grpc).GetLbPolicy(); p != clusterv3.Cluster_RANDOM {
				t.Errorf("grpc (port level) lb = %v", p)
			}
			v1 := clusterOf(t, out, build.ClusterName(cdsReviews, 9080, "v1"))
			if v1.GetLbPolicy() != clusterv3.Cluster_RING_HASH || v1.GetRingHashLbConfig().GetMinimumRingSize().GetValue() != 2048 {
				t.Errorf("v1 = %v", v1)
			}
			if !hasProblem(out, "spec.trafficPolicy.portLevelSettings[0].loadBalancer.warmup", "RANDOM") {
				t.Errorf("warmup with RANDOM not reported at the port level setting: %+v", out.Problems)
			}
		}},
		{name: "maglev", dr: `  trafficPolicy:
    loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 65537}}}
`, check: func(t *testing.T, out *build.Output) {
			c := clusterOf(t, out, tcp)
			if c.GetLbPolicy() != clusterv3.Cluster_MAGLEV || c.GetMaglevLbConfig().GetTableSize().GetValue() != 65537 {
				t.Errorf("cluster = %v", c)
			}
		}},
		{name: "passthrough is original destination", dr: `  trafficPolicy:
    loadBalancer: {simple: PASSTHROUGH}
`, check: func(t *testing.T, out *build.Output) {
			c := clusterOf(t, out, http)
			if c.GetType() != clusterv3.Cluster_ORIGINAL_DST || c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED || c.GetEdsClusterConfig() != nil {
				t.Errorf("cluster = %v", c)
			}
			if n := len(out.Resources[typeurl.Endpoint]); n != 0 {
				t.Errorf("EDS resources = %d, want none for original-destination clusters", n)
			}
		}},
		{name: "connection pool", dr: `  trafficPolicy:
    connectionPool:
      tcp: {maxConnections: 100, connectTimeout: 3s, maxConnectionDuration: 1h, tcpKeepalive: {probes: 3, time: 60s, interval: 10s}}
      http: {http1MaxPendingRequests: 10, http2MaxRequests: 200, maxRequestsPerConnection: 5, maxRetries: 4, idleTimeout: 30s, h2UpgradePolicy: UPGRADE, maxConcurrentStreams: 50}
`, check: func(t *testing.T, out *build.Output) {
			c := clusterOf(t, out, http)
			th := c.GetCircuitBreakers().GetThresholds()[0]
			if th.GetMaxConnections().GetValue() != 100 || th.GetMaxPendingRequests().GetValue() != 10 || th.GetMaxRequests().GetValue() != 200 || th.GetMaxRetries().GetValue() != 4 {
				t.Errorf("thresholds = %v", th)
			}
			if c.GetConnectTimeout().AsDuration().Seconds() != 3 {
				t.Errorf("connect timeout = %v", c.GetConnectTimeout())
			}
			ka := c.GetUpstreamConnectionOptions().GetTcpKeepalive()
			if ka.GetKeepaliveProbes().GetValue() != 3 || ka.GetKeepaliveTime().GetValue() != 60 || ka.GetKeepaliveInterval().GetValue() != 10 {
				t.Errorf("keepalive = %v", ka)
			}
			o := httpOptions(t, c)
			common := o.GetCommonHttpProtocolOptions()
			if common.GetIdleTimeout().AsDuration().Seconds() != 30 || common.GetMaxRequestsPerConnection().GetValue() != 5 || common.GetMaxConnectionDuration().AsDuration().Hours() != 1 {
				t.Errorf("common options = %v", common)
			}
			if h2 := o.GetExplicitHttpConfig().GetHttp2ProtocolOptions(); h2 == nil || h2.GetMaxConcurrentStreams().GetValue() != 50 {
				t.Errorf("h2UpgradePolicy UPGRADE on an HTTP port: options = %v", o)
			}
			tc := clusterOf(t, out, tcp)
			if httpOptions(t, tc) != nil || tc.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue() != 100 {
				t.Errorf("TCP cluster = %v", tc)
			}
		}},
		{name: "use client protocol", dr: `  trafficPolicy:
    connectionPool: {http: {useClientProtocol: true}}
`, check: func(t *testing.T, out *build.Output) {
			if o := httpOptions(t, clusterOf(t, out, http)); o.GetUseDownstreamProtocolConfig() == nil {
				t.Errorf("options = %v", o)
			}
		}},
		{name: "outlier detection", dr: `  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 7, consecutiveGatewayErrors: 0, interval: 5s, baseEjectionTime: 1m, maxEjectionPercent: 50, minHealthPercent: 30}
`, check: func(t *testing.T, out *build.Output) {
			c := clusterOf(t, out, http)
			od := c.GetOutlierDetection()
			if od.GetConsecutive_5Xx().GetValue() != 7 || od.GetEnforcingConsecutive_5Xx().GetValue() != 100 ||
				od.GetConsecutiveGatewayFailure().GetValue() != 0 || od.GetEnforcingConsecutiveGatewayFailure() == nil || od.GetEnforcingConsecutiveGatewayFailure().GetValue() != 0 ||
				od.GetInterval().AsDuration().Seconds() != 5 || od.GetBaseEjectionTime().AsDuration().Minutes() != 1 || od.GetMaxEjectionPercent().GetValue() != 50 {
				t.Errorf("outlier detection = %v", od)
			}
			if p := c.GetCommonLbConfig().GetHealthyPanicThreshold().GetValue(); p != 30 {
				t.Errorf("panic threshold = %v", p)
			}
		}},
		{name: "outlier detection defaults and the deprecated consecutiveErrors", dr: `  trafficPolicy:
    outlierDetection: {baseEjectionTime: 30s}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: {outlierDetection: {consecutiveErrors: 4}}
`, check: func(t *testing.T, out *build.Output) {
			c := clusterOf(t, out, http)
			od := c.GetOutlierDetection()
			// Unset consecutive5xxErrors keeps Envoy's default (5, enforced).
			if od.GetConsecutive_5Xx() != nil || od.GetEnforcingConsecutive_5Xx() != nil || od.GetBaseEjectionTime().AsDuration().Seconds() != 30 {
				t.Errorf("outlier detection = %v", od)
			}
			if p := c.GetCommonLbConfig().GetHealthyPanicThreshold(); p == nil || p.GetValue() != 0 {
				t.Errorf("panic threshold = %v, want 0 (panic mode off)", p)
			}
			v1 := clusterOf(t, out, build.ClusterName(cdsReviews, 9080, "v1")).GetOutlierDetection()
			if v1.GetConsecutiveGatewayFailure().GetValue() != 4 || v1.GetEnforcingConsecutiveGatewayFailure().GetValue() != 100 || v1.GetEnforcingConsecutive_5Xx().GetValue() != 0 {
				t.Errorf("v1 outlier detection = %v", v1)
			}
		}},
		{name: "simple TLS with CA and SANs", dr: `  trafficPolicy:
    tls: {mode: SIMPLE, sni: reviews.example.com, caCertificates: /etc/certs/ca.pem, caCrl: /etc/certs/crl.pem, subjectAltNames: [reviews.example.com, "spiffe://td/ns/demo/sa/reviews", 10.1.2.3]}
`, check: func(t *testing.T, out *build.Output) {
			ctx := gentest.UpstreamTLS(t, clusterOf(t, out, http))
			vc := ctx.GetCommonTlsContext().GetValidationContext()
			if ctx.GetSni() != "reviews.example.com" || vc.GetTrustedCa().GetFilename() != "/etc/certs/ca.pem" || vc.GetCrl().GetFilename() != "/etc/certs/crl.pem" {
				t.Errorf("tls = %v", ctx)
			}
			sans := vc.GetMatchTypedSubjectAltNames()
			if len(sans) != 3 || sans[0].GetSanType() != tlsv3.SubjectAltNameMatcher_DNS || sans[1].GetSanType() != tlsv3.SubjectAltNameMatcher_URI ||
				sans[2].GetSanType() != tlsv3.SubjectAltNameMatcher_IP_ADDRESS || sans[1].GetMatcher().GetExact() != "spiffe://td/ns/demo/sa/reviews" {
				t.Errorf("SANs = %v", sans)
			}
			if len(ctx.GetCommonTlsContext().GetTlsCertificates()) != 0 {
				t.Errorf("SIMPLE has a client certificate")
			}
		}},
		{name: "mutual TLS from files", dr: `  trafficPolicy:
    tls: {mode: MUTUAL, clientCertificate: /c/cert.pem, privateKey: /c/key.pem, caCertificates: /c/ca.pem, credentialName: ignored-on-sidecars}
`, check: func(t *testing.T, out *build.Output) {
			ctx := gentest.UpstreamTLS(t, clusterOf(t, out, http))
			certs := ctx.GetCommonTlsContext().GetTlsCertificates()
			if len(certs) != 1 || certs[0].GetCertificateChain().GetFilename() != "/c/cert.pem" || certs[0].GetPrivateKey().GetFilename() != "/c/key.pem" ||
				len(ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()) != 0 {
				t.Errorf("tls = %v", ctx)
			}
		}},
		{name: "mutual TLS without a client certificate is reported", dr: `  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: {tls: {mode: MUTUAL, caCertificates: /c/ca.pem}}
`, check: func(t *testing.T, out *build.Output) {
			if gentest.UpstreamTLS(t, clusterOf(t, out, build.ClusterName(cdsReviews, 9080, "v1"))) == nil {
				t.Errorf("no TLS on the v1 cluster")
			}
			if gentest.UpstreamTLS(t, clusterOf(t, out, http)) != nil {
				t.Errorf("the subset's TLS leaked to the service cluster")
			}
			if !hasProblem(out, "spec.subsets[0].trafficPolicy.tls", "clientCertificate") {
				t.Errorf("problems = %+v", out.Problems)
			}
		}},
		{name: "credentialName on a gateway", router: true, dr: `  trafficPolicy:
    tls: {mode: MUTUAL, credentialName: reviews-client, subjectAltNames: [reviews.example.com]}
`, check: func(t *testing.T, out *build.Output) {
			ctx := gentest.UpstreamTLS(t, clusterOf(t, out, http)).GetCommonTlsContext()
			sds := ctx.GetTlsCertificateSdsSecretConfigs()
			cvc := ctx.GetCombinedValidationContext()
			if len(sds) != 1 || sds[0].GetName() != "reviews-client" || sds[0].GetSdsConfig().GetAds() == nil ||
				cvc.GetValidationContextSdsSecretConfig().GetName() != "reviews-client-cacert" ||
				len(cvc.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()) != 1 {
				t.Errorf("tls = %v", ctx)
			}
		}},
		{name: "credentialName on a gateway with its agent", router: true, agent: "sds-grpc", dr: `  trafficPolicy:
    tls: {mode: MUTUAL, credentialName: reviews-client}
`, check: func(t *testing.T, out *build.Output) {
			ctx := gentest.UpstreamTLS(t, clusterOf(t, out, http)).GetCommonTlsContext()
			for _, src := range []*corev3.ConfigSource{ctx.GetTlsCertificateSdsSecretConfigs()[0].GetSdsConfig(),
				ctx.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetSdsConfig()} {
				if got := src.GetApiConfigSource().GetGrpcServices(); len(got) != 1 || got[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc" {
					t.Errorf("the client certificate comes from %v; want the gateway's agent, never the hub", src)
				}
			}
		}},
		{name: "istio mutual", dr: `  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
`, check: func(t *testing.T, out *build.Output) {
			ctx := gentest.UpstreamTLS(t, clusterOf(t, out, http))
			c := ctx.GetCommonTlsContext()
			if ctx.GetSni() != "outbound_.9080_._."+cdsReviews || c.GetTlsCertificateSdsSecretConfigs()[0].GetName() != build.WorkloadCertSecret ||
				c.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != build.RootCASecret {
				t.Errorf("tls = %v", ctx)
			}
		}},
		{name: "disable", dr: `  trafficPolicy:
    tls: {mode: DISABLE}
`, check: func(t *testing.T, out *build.Output) {
			if gentest.UpstreamTLS(t, clusterOf(t, out, http)) != nil {
				t.Errorf("DISABLE originates TLS")
			}
		}},
		{name: "unsupported settings are reported", dr: `  trafficPolicy:
    tunnel: {protocol: CONNECT, targetHost: proxy.example.com, targetPort: 8080}
    proxyProtocol: {version: V1}
`, check: func(t *testing.T, out *build.Output) {
			if !hasProblem(out, "spec.trafficPolicy.tunnel", "not supported") {
				t.Errorf("tunnel not reported: %+v", out.Problems)
			}
			if !hasProblem(out, "spec.trafficPolicy.proxyProtocol", "not supported") {
				t.Errorf("proxyProtocol not reported: %+v", out.Problems)
			}
		}},
		{name: "router gets outbound clusters only", router: true, check: func(t *testing.T, out *build.Output) {
			clusterOf(t, out, http)
			clusterOf(t, out, build.BlackHoleCluster)
			clusterOf(t, out, build.PassthroughCluster)
			for _, r := range out.Resources[typeurl.Cluster] {
				if strings.HasPrefix(r.Name, "inbound|") || r.Name == build.InboundPassthroughCluster {
					t.Errorf("router has %s", r.Name)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := reviewsConfig
			if tt.dr != "" {
				y += dr(tt.dr)
			}
			key := sidecarKey("demo", mesh.Locality{})
			if tt.router {
				key.Type = proxy.Router
			}
			key.SDSCluster = tt.agent
			tt.check(t, envoyOut(t, y, key))
		})
	}
}

// TestWorkloadSecretsFromTheLocalAgent: a proxy whose node names an SDS
// cluster (a local agent) gets its workload secrets from it, outbound and
// inbound; others from the hub over ADS.
func TestWorkloadSecretsFromTheLocalAgent(t *testing.T) {
	y := reviewsConfig + dr(`  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
`)
	http := build.ClusterName(cdsReviews, 9080, "")
	for _, agent := range []string{"", "sds-grpc"} {
		key := sidecarKey("demo", mesh.Locality{})
		key.SDSCluster = agent
		c := gentest.UpstreamTLS(t, clusterOf(t, envoyOut(t, y, key), http)).GetCommonTlsContext()
		sources := []*corev3.ConfigSource{c.GetTlsCertificateSdsSecretConfigs()[0].GetSdsConfig(),
			c.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetSdsConfig()}
		inKey := ldsSidecarKey
		inKey.SDSCluster = agent
		for _, r := range envoyOut(t, ldsMesh+meshMTLS("STRICT"), inKey).Resources[typeurl.Listener] {
			l, ok := r.Message.(*listenerv3.Listener)
			if !ok {
				t.Fatalf("listener %s is a %T", r.Name, r.Message)
			}
			for _, fc := range l.GetFilterChains() {
				d := &tlsv3.DownstreamTlsContext{}
				if fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(d) != nil {
					continue
				}
				ctx := d.GetCommonTlsContext()
				sources = append(sources, ctx.GetTlsCertificateSdsSecretConfigs()[0].GetSdsConfig(), ctx.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetSdsConfig())
			}
		}
		if len(sources) < 4 {
			t.Fatalf("SDS_CLUSTER %q: found %d secret sources; want the outbound cluster's and an inbound chain's", agent, len(sources))
		}
		for _, src := range sources {
			got := src.GetApiConfigSource().GetGrpcServices()
			switch {
			case agent == "" && src.GetAds() == nil:
				t.Errorf("without an agent: secrets from %v; want ADS", src)
			case agent != "" && (len(got) != 1 || got[0].GetEnvoyGrpc().GetClusterName() != agent):
				t.Errorf("with agent %q: secrets from %v; want that cluster", agent, src)
			}
		}
	}
}

func TestEnvoyClusterResolution(t *testing.T) {
	const y = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: dns, namespace: demo}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: https, protocol: TLS}]
  endpoints:
  - {address: a.example.com, locality: r1/z1}
  - {address: b.example.com, ports: {https: 8443}, locality: r1/z2}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bare, namespace: demo}
spec:
  hosts: [bare.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 80, name: http, protocol: HTTP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: rr, namespace: demo}
spec:
  hosts: [rr.example.com]
  location: MESH_EXTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: one.example.com}, {address: two.example.com}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: any, namespace: demo}
spec:
  hosts: [any.example.com]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{number: 5432, name: pg, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wild, namespace: demo}
spec:
  hosts: ["*.wild.example.com"]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 80, name: http, protocol: HTTP}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: rr, namespace: demo}
spec:
  host: rr.example.com
  subsets: [{name: none, labels: {version: v9}}]
`
	out := envoyOut(t, y, sidecarKey("demo", mesh.Locality{}))
	addr := func(lb *endpointv3.LbEndpoint) (string, uint32) {
		sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
		return sa.GetAddress(), sa.GetPortValue()
	}

	c := clusterOf(t, out, build.ClusterName("api.example.com", 443, ""))
	if c.GetType() != clusterv3.Cluster_STRICT_DNS || c.GetEdsClusterConfig() != nil {
		t.Errorf("DNS cluster = %v", c)
	}
	locs := c.GetLoadAssignment().GetEndpoints()
	if len(locs) != 2 {
		t.Fatalf("DNS localities = %v", locs)
	}
	if a, p := addr(locs[0].GetLbEndpoints()[0]); a != "a.example.com" || p != 443 {
		t.Errorf("first DNS endpoint = %s:%d", a, p)
	}
	if a, p := addr(locs[1].GetLbEndpoints()[0]); a != "b.example.com" || p != 8443 {
		t.Errorf("second DNS endpoint = %s:%d", a, p)
	}

	bare := clusterOf(t, out, build.ClusterName("bare.example.com", 80, ""))
	if a, p := addr(bare.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0]); a != "bare.example.com" || p != 80 {
		t.Errorf("DNS service without endpoints resolves %s:%d, want its host", a, p)
	}

	rr := clusterOf(t, out, build.ClusterName("rr.example.com", 80, ""))
	locs = rr.GetLoadAssignment().GetEndpoints()
	if rr.GetType() != clusterv3.Cluster_LOGICAL_DNS || len(locs) != 1 || len(locs[0].GetLbEndpoints()) != 1 {
		t.Fatalf("LOGICAL_DNS cluster = %v", rr)
	}
	if a, _ := addr(locs[0].GetLbEndpoints()[0]); a != "one.example.com" {
		t.Errorf("LOGICAL_DNS endpoint = %s, want the first", a)
	}
	if !hasProblem(out, "spec.endpoints", "ignoring 1 more") {
		t.Errorf("problems = %+v", out.Problems)
	}

	// Envoy wants exactly one endpoint in a LOGICAL_DNS cluster: an empty
	// subset becomes an empty STRICT_DNS cluster.
	none := clusterOf(t, out, build.ClusterName("rr.example.com", 80, "none"))
	if none.GetType() != clusterv3.Cluster_STRICT_DNS || len(none.GetLoadAssignment().GetEndpoints()) != 0 {
		t.Errorf("empty DNS_ROUND_ROBIN subset = %v", none)
	}

	wild := clusterOf(t, out, build.ClusterName("*.wild.example.com", 80, ""))
	if len(wild.GetLoadAssignment().GetEndpoints()) != 0 || !hasProblem(out, "spec.resolution", "wildcard") {
		t.Errorf("wildcard DNS cluster = %v; problems %+v", wild, out.Problems)
	}

	od := clusterOf(t, out, build.ClusterName("any.example.com", 5432, ""))
	if od.GetType() != clusterv3.Cluster_ORIGINAL_DST || od.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED || od.GetLoadAssignment() != nil {
		t.Errorf("NONE cluster = %v", od)
	}
	if n := len(out.Resources[typeurl.Endpoint]); n != 0 {
		t.Errorf("EDS resources = %v, want none (no EDS clusters)", gentest.Names(out.Resources[typeurl.Endpoint]))
	}
}

func TestEnvoySpecialAndInboundClusters(t *testing.T) {
	key := sidecarKey("demo", mesh.Locality{})
	key.IPs = "10.0.0.1" // the reviews v1 endpoint
	out := envoyOut(t, reviewsConfig, key)
	if c := clusterOf(t, out, build.BlackHoleCluster); c.GetType() != clusterv3.Cluster_STATIC || c.GetLoadAssignment() != nil {
		t.Errorf("black hole = %v", c)
	}
	for _, n := range []string{build.PassthroughCluster, build.InboundPassthroughCluster} {
		if c := clusterOf(t, out, n); c.GetType() != clusterv3.Cluster_ORIGINAL_DST || c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
			t.Errorf("%s = %v", n, c)
		}
	}
	// Ports: http → 19080 (endpoint port map), grpc → 7070, tcp → 13306 (targetPort).
	for _, tp := range []uint32{19080, 7070, 13306} {
		c := clusterOf(t, out, build.InboundClusterName(tp))
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if c.GetType() != clusterv3.Cluster_STATIC || sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != tp {
			t.Errorf("inbound %d = %v", tp, c)
		}
		if h2 := httpOptions(t, c).GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil; h2 != (tp == 7070) {
			t.Errorf("inbound %d: HTTP/2 = %v", tp, h2)
		}
	}
	if n := len(out.Resources[typeurl.Cluster]); n != 3+3+3 {
		t.Errorf("clusters = %v", gentest.Names(out.Resources[typeurl.Cluster]))
	}
}

func TestEnvoyClustersAndEndpointsAreDeterministic(t *testing.T) {
	y := reviewsConfig + dr(`  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3}
    loadBalancer: {localityLbSetting: {failover: [{from: us-east, to: eu}]}}
    tls: {mode: ISTIO_MUTUAL}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`)
	s := gentest.Snapshot(t, map[string]string{"c1": y, "c2": y})
	key := sidecarKey("demo", mesh.Locality{Region: "us-east", Zone: "zone-a"})
	a, b := generate(s, key), generate(s, key)
	for _, typeURL := range []string{typeurl.Cluster, typeurl.Endpoint} {
		ra, rb := a.Resources[typeURL], b.Resources[typeURL]
		if len(ra) == 0 || len(ra) != len(rb) {
			t.Fatalf("%s: %d vs %d resources", typeURL, len(ra), len(rb))
		}
		for i := range ra {
			if ra[i].Name != rb[i].Name || !proto.Equal(ra[i].Message, rb[i].Message) {
				t.Errorf("%s %s differs between runs", typeURL, ra[i].Name)
			}
			ma, _ := proto.MarshalOptions{Deterministic: true}.Marshal(ra[i].Message)
			mb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(rb[i].Message)
			if string(ma) != string(mb) {
				t.Errorf("%s %s marshals differently between runs", typeURL, ra[i].Name)
			}
		}
	}
}
