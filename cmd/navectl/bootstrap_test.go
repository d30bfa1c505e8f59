package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/xdsbootstrap"
)

func TestBootstrap(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "hub-ca.pem")
	if err := os.WriteFile(ca, x509test.NewAuthority("hub").PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"bootstrap", "--name", "vm-1", "--namespace", "shop", "--service-account", "web", "--ip", "192.0.2.7",
		"--hub", "hub.example:15010", "--hub-ca", ca, "--cert-dir", "/etc/nave", "--labels", "app=web,version=v1", "--fallback", "spoke.example:15010"}

	r := navectlRun(t, append(common, "--kind", "envoy")...)
	if r.code != 0 {
		t.Fatalf("envoy: exit %d: %s", r.code, r.stderr)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal([]byte(r.stdout), b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	if b.GetNode().GetId() != "sidecar~192.0.2.7~vm-1.shop~shop.svc.cluster.local" ||
		b.GetNode().GetMetadata().GetFields()["LABELS"].GetStructValue().GetFields()["version"].GetStringValue() != "v1" {
		t.Errorf("node %v", b.GetNode())
	}
	if strings.Contains(r.stdout, xdsbootstrap.MetaSDSCluster) || !strings.Contains(r.stdout, "/etc/nave/key.pem") {
		t.Error("a VM's Envoy bootstrap must take its certificate from the files, not an agent")
	}
	if ms := b.GetStaticResources().GetClusters()[0].GetTransportSocketMatches(); len(ms) != 1 || !strings.Contains(r.stdout, `"filename": "/etc/nave/root-cert.pem"`) {
		t.Errorf("transport socket matches %v: the fallback endpoint must be verified with the mesh roots' file", ms)
	}

	// A gateway outside Kubernetes: an Envoy bootstrap whose node is a
	// router, selected by the Gateways matching its labels.
	r = navectlRun(t, append(common, "--kind", "gateway", "--labels", "istio=ingressgateway")...)
	if r.code != 0 {
		t.Fatalf("gateway: exit %d: %s", r.code, r.stderr)
	}
	gw := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal([]byte(r.stdout), gw); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := gw.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	if gw.GetNode().GetId() != "router~192.0.2.7~vm-1.shop~shop.svc.cluster.local" ||
		gw.GetNode().GetMetadata().GetFields()["LABELS"].GetStructValue().GetFields()["istio"].GetStringValue() != "ingressgateway" {
		t.Errorf("gateway node %v: want router~ with the labels", gw.GetNode())
	}
	if !strings.Contains(r.stdout, "/etc/nave/key.pem") {
		t.Error("a gateway outside Kubernetes must take its certificate from the files")
	}

	// --network is the node's NETWORK (as a pod's agent sets it).
	r = navectlRun(t, append(common, "--kind", "envoy", "--network", "net-vm")...)
	if r.code != 0 {
		t.Fatalf("envoy --network: exit %d: %s", r.code, r.stderr)
	}
	nb := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal([]byte(r.stdout), nb); err != nil {
		t.Fatal(err)
	}
	if got := nb.GetNode().GetMetadata().GetFields()[xdsbootstrap.MetaNetwork].GetStringValue(); got != "net-vm" {
		t.Errorf("node metadata NETWORK %q, want net-vm", got)
	}
	if _, ok := b.GetNode().GetMetadata().GetFields()[xdsbootstrap.MetaNetwork]; ok {
		t.Error("a bootstrap without --network has node metadata NETWORK")
	}

	out := filepath.Join(dir, "grpc.json")
	if r := navectlRun(t, append(common, "--kind", "grpc", "--out", out)...); r.code != 0 || r.stdout != "" {
		t.Fatalf("grpc: exit %d, stdout %q: %s", r.code, r.stdout, r.stderr)
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var g xdsbootstrap.Bootstrap
	if err := json.Unmarshal(doc, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.XDSServers) != 2 || g.XDSServers[1].ServerURI != "spoke.example:15010" || g.XDSServers[0].ChannelCreds[0].Config.CACertificateFile != ca ||
		g.Node.Metadata["GENERATOR"] != "grpc" || g.CertificateProviders["default"].Config.CACertificateFile != "/etc/nave/root-cert.pem" {
		t.Errorf("grpc bootstrap %s", doc)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bootstrap", "--kind", "envoy"}, "--name is required"},
		{append(common, "--kind", "istio"), "--kind \"istio\""},
		{append(common, "--kind", "grpc", "--ip", "1.2.3"), "--ip"},
		{append(common, "--kind", "grpc", "--labels", "app"), "--labels"},
		{append(common, "--kind", "envoy", "--hub", "hub"), "xds address"},
		{append(common, "--kind", "envoy", "--network", "net 1"), "--network"},
	} {
		if r := navectlRun(t, c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 naming %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := navectlRun(t, append(common, "--kind", "envoy", "--hub-ca", filepath.Join(dir, "none"))...); r.code != 1 || !strings.Contains(r.stderr, "--hub-ca") {
		t.Errorf("missing CA file: exit %d, %q", r.code, r.stderr)
	}
}
