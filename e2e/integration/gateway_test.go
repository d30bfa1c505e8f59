package integration

import (
	"slices"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/navemesh/nave/hub/ingest"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/spoke/agent"
	"github.com/navemesh/nave/spoke/agentconfig"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// gatewayConfig is a cluster's config with an ingress gateway's Service
// (80 -> 8080 on the gateway pod 10.2.0.7) and two Gateways: one
// selecting the gateway's labels, one another gateway's.
const gatewayConfig = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ingress-gateway, namespace: istio-ingress}
spec:
  hosts: [ingress-gateway.istio-ingress.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: STATIC
  endpoints: [{address: 10.2.0.7}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: web, namespace: istio-ingress}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: east-west, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers: [{port: {number: 9000, name: tcp, protocol: TCP}, hosts: ["*"]}]
`

// TestRouterGetsItsGatewaysListeners: a gateway pod's agent (proxyType
// router, as the gateway injection template configures it) writes a
// bootstrap whose node, sent to the hub over ADS, is served the
// listener of the Gateway selecting its labels — on the Service's target
// port — and not the other Gateway's.
func TestRouterGetsItsGatewaysListeners(t *testing.T) {
	var f *adsFixture
	in := newHubIngest(ingest.StoreOptions{
		StaleGracePeriod: time.Hour,
		OnChange:         func(meshName string, _ bool) { f.pc.Notify(meshName) },
	}, ingest.ServerOptions{})
	f = newADSFixture(t, in)
	spokes := serveGRPC(t, func(s *grpc.Server) { protocolv1.RegisterSyncServer(s, in.srv) })
	s := connectSpoke(t, spokes, "m", "c1")
	s.sendState(pushctxtest.Decode(t, gatewayConfig))
	s.synced()

	cfg := agentconfig.Config{Mode: agentconfig.ModeEnvoy, ProxyType: agentconfig.ProxyRouter, Mesh: "m", Cluster: "c1",
		TrustDomain: "cluster.local", DomainSuffix: "cluster.local",
		Pod:   agentconfig.Pod{Name: "ingress-gateway-5c7d9-x2x4q", Namespace: "istio-ingress", ServiceAccount: "ingress-gateway", IP: "10.2.0.7"},
		Trust: agentconfig.Trust{HubCA: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
		XDS:   agentconfig.XDS{Address: f.addr}, Dir: t.TempDir(), Envoy: agentconfig.Envoy{AdminPort: 15000, ReadyPort: 15020}}
	doc, err := agent.Bootstrap(cfg, map[string]string{"app": "ingress-gateway", "istio": "ingressgateway"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(doc, b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}

	p := f.connect(t, b.GetNode())
	p.Subscribe(typeurl.Listener)
	lds := p.Next(typeurl.Listener)
	if got := adstest.Names(t, lds); !slices.Equal(got, []string{"0.0.0.0_8080"}) {
		t.Fatalf("the router %s got listeners %v, want its Gateway's 0.0.0.0_8080 alone", b.GetNode().GetId(), got)
	}
	p.ACK(lds)
	p.Subscribe(typeurl.Route, "http.8080")
	if got := adstest.Names(t, p.Next(typeurl.Route)); !slices.Equal(got, []string{"http.8080"}) {
		t.Fatalf("routes %v, want http.8080", got)
	}
}
