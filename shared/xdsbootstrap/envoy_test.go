package xdsbootstrap

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

const testCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

// parseEnvoy unmarshals a bootstrap into Envoy's own proto, strictly, and
// runs the proto's generated validation.
func parseEnvoy(t *testing.T, doc []byte) *bootstrapv3.Bootstrap {
	t.Helper()
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(doc, b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v\n%s", err, doc)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("Envoy bootstrap does not validate: %v", err)
	}
	return b
}

const testMeshRoots = "-----BEGIN CERTIFICATE-----\nMESH\n-----END CERTIFICATE-----\n"

func TestEnvoyBootstrapWithSDS(t *testing.T) {
	e := &Envoy{
		NodeID:     NodeID("sidecar", "10.0.0.5", "web-1", "shop", "cluster.local"),
		Cluster:    "web.shop",
		Metadata:   map[string]any{"NAMESPACE": "shop", "LABELS": map[string]string{"app": "web"}, "MESH": "default"},
		XDSAddress: "hub.example:15010", FallbackAddress: "10.1.0.1:15010", FallbackRootsPEM: testMeshRoots,
		HubCAPEM: testCA, SDSSocket: "/var/run/nave/sds.sock", AdminPort: 15000, ReadyPort: 15020,
	}
	doc, err := e.JSON()
	if err != nil {
		t.Fatal(err)
	}
	b := parseEnvoy(t, doc)
	if got := b.GetNode().GetId(); got != "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local" {
		t.Errorf("node id %q", got)
	}
	if got := b.GetNode().GetMetadata().GetFields()["LABELS"].GetStructValue().GetFields()["app"].GetStringValue(); got != "web" {
		t.Errorf("metadata LABELS.app = %q", got)
	}
	if got := b.GetNode().GetMetadata().GetFields()[MetaSDSCluster].GetStringValue(); got != SDSCluster {
		t.Errorf("metadata %s = %q; want %s", MetaSDSCluster, got, SDSCluster)
	}
	if _, ok := e.Metadata[MetaSDSCluster]; ok {
		t.Error("JSON changed the caller's metadata")
	}
	if a := b.GetAdmin().GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" || a.GetPortValue() != 15000 {
		t.Errorf("admin on %v; want 127.0.0.1:15000", a)
	}
	if n := b.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName(); n != XDSCluster {
		t.Errorf("ADS on cluster %q", n)
	}
	clusters := map[string]int{}
	for i, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = i
	}
	xds := b.GetStaticResources().GetClusters()[clusters[XDSCluster]]
	eps := xds.GetLoadAssignment().GetEndpoints()
	if len(eps) != 2 || eps[0].GetPriority() != 0 || eps[1].GetPriority() != 1 ||
		eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "hub.example" ||
		eps[1].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "10.1.0.1" {
		t.Errorf("xds endpoints %v; want the hub at priority 0, the fallback at 1", eps)
	}
	if xds.GetType().String() != "STRICT_DNS" {
		t.Errorf("xds cluster type %s; the hub is a DNS name", xds.GetType())
	}
	tc := &tlsv3.UpstreamTlsContext{}
	if err := xds.GetTransportSocket().GetTypedConfig().UnmarshalTo(tc); err != nil {
		t.Fatal(err)
	}
	if tc.GetSni() != "hub.example" {
		t.Errorf("SNI %q", tc.GetSni())
	}
	sds := tc.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()
	if len(sds) != 1 || sds[0].GetName() != WorkloadCertSecret ||
		sds[0].GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != SDSCluster {
		t.Errorf("the ADS connection's certificate is %v; want SDS %q from %s", sds, WorkloadCertSecret, SDSCluster)
	}
	if got := tc.GetCommonTlsContext().GetValidationContext().GetTrustedCa().GetInlineString(); got != testCA {
		t.Errorf("hub CA %q", got)
	}
	// The fallback endpoint has its own TLS context: the mesh roots and
	// the name it is dialled by; the same workload certificate.
	if md := eps[1].GetLbEndpoints()[0].GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["nave.xds"].GetStringValue(); md != "fallback" ||
		eps[0].GetLbEndpoints()[0].GetMetadata() != nil {
		t.Errorf("endpoint metadata: hub %v, fallback %v; want only the fallback matched", eps[0].GetLbEndpoints()[0].GetMetadata(), eps[1].GetLbEndpoints()[0].GetMetadata())
	}
	matches := xds.GetTransportSocketMatches()
	if len(matches) != 1 || matches[0].GetMatch().GetFields()["nave.xds"].GetStringValue() != "fallback" {
		t.Fatalf("transport socket matches %v; want one for the fallback endpoint", matches)
	}
	fb := &tlsv3.UpstreamTlsContext{}
	if err := matches[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(fb); err != nil {
		t.Fatal(err)
	}
	fv := fb.GetCommonTlsContext().GetValidationContext()
	if fv.GetTrustedCa().GetInlineString() != testMeshRoots || len(fv.GetMatchTypedSubjectAltNames()) != 1 ||
		fv.GetMatchTypedSubjectAltNames()[0].GetSanType().String() != "IP_ADDRESS" || fv.GetMatchTypedSubjectAltNames()[0].GetMatcher().GetExact() != "10.1.0.1" {
		t.Errorf("fallback validation %v; want the mesh roots and IP 10.1.0.1", fv)
	}
	if s := fb.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs(); len(s) != 1 || s[0].GetName() != WorkloadCertSecret {
		t.Errorf("fallback certificate %v; want the workload's", s)
	}
	if tc.GetCommonTlsContext().GetValidationContext().GetTrustedCa().GetInlineString() != testCA {
		t.Error("the fallback's context changed the hub's")
	}
	if pipe := b.GetStaticResources().GetClusters()[clusters[SDSCluster]].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetPipe().GetPath(); pipe != "/var/run/nave/sds.sock" {
		t.Errorf("SDS cluster on %q", pipe)
	}
	if ls := b.GetStaticResources().GetListeners(); len(ls) != 1 || ls[0].GetAddress().GetSocketAddress().GetPortValue() != 15020 {
		t.Errorf("listeners %v; want the readiness listener on 15020", ls)
	}
	if strings.Contains(string(doc), "PRIVATE KEY") {
		t.Error("the bootstrap holds a key")
	}
}

// TestEnvoyBootstrapHubAddresses: a replica set's addresses (decision 051)
// are priorities after the first, in their order, before the fallback,
// which keeps its own TLS context; the hub's endpoints keep the hub's.
func TestEnvoyBootstrapHubAddresses(t *testing.T) {
	e := &Envoy{NodeID: NodeID("sidecar", "10.0.0.5", "web-1", "shop", "cluster.local"),
		XDSAddress: "10.0.0.2:15012", HubAddresses: []string{"10.0.0.3:15012", "nave-hub.nave-system.svc:15012"},
		FallbackAddress: "10.1.0.1:15010", FallbackRootsPEM: testMeshRoots, ServerName: "nave-hub.nave-system.svc",
		HubCAPEM: testCA, SDSSocket: "/s", AdminPort: 15000}
	doc, err := e.JSON()
	if err != nil {
		t.Fatal(err)
	}
	b := parseEnvoy(t, doc)
	var xds = b.GetStaticResources().GetClusters()[len(b.GetStaticResources().GetClusters())-1]
	if xds.GetName() != XDSCluster {
		t.Fatalf("last cluster %q; want %s", xds.GetName(), XDSCluster)
	}
	var got []string
	for i, ep := range xds.GetLoadAssignment().GetEndpoints() {
		if ep.GetPriority() != uint32(i) {
			t.Errorf("endpoint %d at priority %d", i, ep.GetPriority())
		}
		lb := ep.GetLbEndpoints()[0]
		a := lb.GetEndpoint().GetAddress().GetSocketAddress()
		got = append(got, fmt.Sprintf("%s:%d", a.GetAddress(), a.GetPortValue()))
		if fb := lb.GetMetadata() != nil; fb != (i == 3) {
			t.Errorf("endpoint %d (%s) has transport socket metadata %v", i, got[i], lb.GetMetadata())
		}
	}
	if want := []string{"10.0.0.2:15012", "10.0.0.3:15012", "nave-hub.nave-system.svc:15012", "10.1.0.1:15010"}; !slices.Equal(got, want) {
		t.Errorf("xds endpoints %v; want %v", got, want)
	}
	if xds.GetType().String() != "STRICT_DNS" {
		t.Errorf("xds cluster type %s; one hub address is a DNS name", xds.GetType())
	}
	e.HubAddresses = []string{"10.0.0.3:15012"}
	doc, err = e.JSON()
	if err != nil {
		t.Fatal(err)
	}
	b = parseEnvoy(t, doc)
	if typ := b.GetStaticResources().GetClusters()[len(b.GetStaticResources().GetClusters())-1].GetType().String(); typ != "STATIC" {
		t.Errorf("xds cluster type %s; every address is an IP", typ)
	}
	e.HubAddresses = []string{"hub-1"}
	if _, err := e.JSON(); err == nil || !strings.Contains(err.Error(), "hub address") {
		t.Errorf("a hub address without a port: err %v", err)
	}
}

// TestEnvoyBootstrapFailsOver checks what lets a real Envoy leave an
// unreachable ADS host for the next priority (decision 054): outlier
// detection on local-origin failures only, any host ejectable, and HTTP/2
// keepalive pings that notice a hub gone silent.
func TestEnvoyBootstrapFailsOver(t *testing.T) {
	e := &Envoy{NodeID: NodeID("sidecar", "10.0.0.5", "web-1", "shop", "cluster.local"),
		XDSAddress: "10.0.0.2:15012", HubCAPEM: testCA, SDSSocket: "/s", AdminPort: 15000}
	xdsCluster := func() *clusterv3.Cluster {
		t.Helper()
		doc, err := e.JSON()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range parseEnvoy(t, doc).GetStaticResources().GetClusters() {
			if c.GetName() == XDSCluster {
				return c
			}
		}
		t.Fatalf("no %s cluster", XDSCluster)
		return nil
	}
	one := xdsCluster()
	if one.GetOutlierDetection() != nil {
		t.Errorf("one ADS host, with outlier detection %v: there is nowhere to fail over to", one.GetOutlierDetection())
	}
	opts := &httpv3.HttpProtocolOptions{}
	if err := one.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(opts); err != nil {
		t.Fatal(err)
	}
	ka := opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions().GetConnectionKeepalive()
	if ka.GetInterval().AsDuration() == 0 || ka.GetTimeout().AsDuration() == 0 {
		t.Errorf("ADS cluster keepalive %v: a hub gone silent would never be noticed", ka)
	}
	// grpc-go's default enforcement (5 min) would answer pings this
	// frequent with GOAWAY; the hub's and the fallback's servers allow
	// one every 10 s.
	if ka.GetInterval().AsDuration() < 10*time.Second {
		t.Errorf("keepalive interval %v is below the servers' minimum of 10s", ka.GetInterval().AsDuration())
	}

	for name, more := range map[string]func(){
		"fallback": func() { e.FallbackAddress, e.FallbackRootsPEM = "10.1.0.1:15010", testMeshRoots },
		"replicas": func() { e.HubAddresses = []string{"10.0.0.3:15012"} },
	} {
		e.FallbackAddress, e.FallbackRootsPEM, e.HubAddresses = "", "", nil
		more()
		od := xdsCluster().GetOutlierDetection()
		if od == nil {
			t.Fatalf("%s: no outlier detection: an unreachable hub stays healthy and Envoy never dials priority 1", name)
		}
		if !od.GetSplitExternalLocalOriginErrors() || od.GetConsecutiveLocalOriginFailure().GetValue() == 0 ||
			od.GetEnforcingConsecutiveLocalOriginFailure().GetValue() != 100 {
			t.Errorf("%s: connect failures do not eject: %v", name, od)
		}
		// The standby fallback answers UNAVAILABLE: an external error
		// that must not eject it.
		if od.GetEnforcingConsecutive_5Xx() == nil || od.GetEnforcingConsecutive_5Xx().GetValue() != 0 {
			t.Errorf("%s: gRPC errors eject hosts (enforcing_consecutive_5xx %v)", name, od.GetEnforcingConsecutive_5Xx())
		}
		if od.GetMaxEjectionPercent().GetValue() != 100 {
			t.Errorf("%s: max_ejection_percent %v: Envoy would keep an unreachable hub of two hosts", name, od.GetMaxEjectionPercent())
		}
	}
}

func TestEnvoyBootstrapWithFiles(t *testing.T) {
	doc, err := (&Envoy{NodeID: NodeID("sidecar", "192.0.2.7", "vm-1", "shop", "cluster.local"),
		XDSAddress: "127.0.0.1:15010", HubCAPEM: testCA, CertFile: "/etc/nave/cert-chain.pem", KeyFile: "/etc/nave/key.pem",
		AdminPort: 15000}).JSON()
	if err != nil {
		t.Fatal(err)
	}
	b := parseEnvoy(t, doc)
	xds := b.GetStaticResources().GetClusters()[0]
	if len(b.GetStaticResources().GetClusters()) != 1 || xds.GetType().String() != "STATIC" || len(b.GetStaticResources().GetListeners()) != 0 {
		t.Fatalf("clusters %v, listeners %v; want only a STATIC xds cluster", b.GetStaticResources().GetClusters(), b.GetStaticResources().GetListeners())
	}
	tc := &tlsv3.UpstreamTlsContext{}
	if err := xds.GetTransportSocket().GetTypedConfig().UnmarshalTo(tc); err != nil {
		t.Fatal(err)
	}
	certs := tc.GetCommonTlsContext().GetTlsCertificates()
	if len(certs) != 1 || certs[0].GetPrivateKey().GetFilename() != "/etc/nave/key.pem" {
		t.Errorf("certificates %v; want the files", certs)
	}
	if m := tc.GetCommonTlsContext().GetValidationContext().GetMatchTypedSubjectAltNames(); len(m) != 1 || m[0].GetSanType().String() != "IP_ADDRESS" {
		t.Errorf("SAN matchers %v; want the hub's IP address", m)
	}
}

func TestEnvoyBootstrapRefuses(t *testing.T) {
	good := Envoy{NodeID: "sidecar~~a.b~b.svc.cluster.local", XDSAddress: "hub:15010", HubCAPEM: testCA, SDSSocket: "/s", AdminPort: 15000}
	for _, c := range []struct {
		name string
		edit func(*Envoy)
		want string
	}{
		{"no node id", func(e *Envoy) { e.NodeID = "" }, "node id"},
		{"bad address", func(e *Envoy) { e.XDSAddress = "hub" }, "xds address"},
		{"bad port", func(e *Envoy) { e.XDSAddress = "hub:0" }, "port"},
		{"bad fallback", func(e *Envoy) { e.FallbackAddress = ":1" }, "fallback"},
		{"fallback without mesh roots", func(e *Envoy) { e.FallbackAddress = "spoke:15010" }, "a fallback address needs the mesh roots"},
		{"no CA", func(e *Envoy) { e.HubCAPEM = "" }, "CA"},
		{"no certificate", func(e *Envoy) { e.SDSSocket = "" }, "SDS socket"},
		{"admin port", func(e *Envoy) { e.AdminPort = 0 }, "admin port"},
		{"ready = admin", func(e *Envoy) { e.ReadyPort = 15000 }, "ready port"},
	} {
		e := good
		c.edit(&e)
		if _, err := e.JSON(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v; want one naming %q", c.name, err, c.want)
		}
	}
}

func TestGRPCBootstrapFallback(t *testing.T) {
	doc, err := New("hub:15010", "n", nil, &TLSFiles{CACertificateFile: "ca"}).WithFallback("spoke:15010").WithFallback("").JSON()
	if err != nil {
		t.Fatal(err)
	}
	var b Bootstrap
	if err := json.Unmarshal(doc, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.XDSServers) != 2 || b.XDSServers[0].ServerURI != "hub:15010" || b.XDSServers[1].ServerURI != "spoke:15010" ||
		b.XDSServers[1].ChannelCreds[0].Config.CACertificateFile != "ca" {
		t.Errorf("servers %+v; want the hub first, the fallback second with the same credentials", b.XDSServers)
	}
}

// TestGRPCBootstrapLocality: the node's locality is written in grpc-go's
// bootstrap form (gRFC A27: region, zone, sub_zone), and left out when
// unknown.
func TestGRPCBootstrapLocality(t *testing.T) {
	doc, err := New("127.0.0.1:1", "n", nil, nil).WithLocality("r1", "z1", "s1").JSON()
	if err != nil {
		t.Fatal(err)
	}
	if want := `"node":{"id":"n","locality":{"region":"r1","zone":"z1","sub_zone":"s1"}}`; !strings.Contains(string(doc), want) {
		t.Errorf("bootstrap %s lacks %s", doc, want)
	}
	doc, err = New("127.0.0.1:1", "n", nil, nil).WithLocality("", "", "").JSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc), "locality") {
		t.Errorf("bootstrap %s has a locality, want none", doc)
	}
}
