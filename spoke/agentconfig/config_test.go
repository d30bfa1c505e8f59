package agentconfig

import (
	"bytes"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/settings"
)

var testRoot = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: x509test.NewAuthority("root").Cert.Raw}))

// podArgs is what an injected pod sets, as flags.
func podArgs(extra ...string) []string {
	return append([]string{"--cluster", "c1", "--pod.name", "web-1", "--pod.namespace", "shop", "--pod.service-account", "web",
		"--ra.address", "spoke.nave-system:15023", "--ra.identity", "spiffe://cluster.local/nave/cluster/c1",
		"--trust.mesh-roots", testRoot, "--trust.hub-ca", testRoot, "--xds.address", "hub.example:15010"}, extra...)
}

func TestLoadsWhatAPodGives(t *testing.T) {
	var c Config
	if err := settings.Load(Program, &c, podArgs(), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if c.Mode != ModeEnvoy || c.Dir != "/var/run/nave" || c.Status.Listen != ":15021" || c.RA.TokenFile != "/var/run/secrets/tokens/istio-token" ||
		c.Envoy.AdminPort != 15000 || c.ProxyUID != 1337 || c.ProxyType != ProxySidecar || c.Pod.LabelsFile != "/etc/nave/pod/labels" {
		t.Errorf("defaults %+v differ from the contract's", c)
	}
	id, err := c.WorkloadID()
	if err != nil || id.String() != "spiffe://cluster.local/ns/shop/sa/web" {
		t.Errorf("workload id %s (%v)", id, err)
	}
	if c.DNS.Address != "localhost:15053" || c.DNS.ResolvConf != "/etc/resolv.conf" || c.DNS.UpstreamTimeout != 5e9 || c.DNSCapture() {
		t.Errorf("dns %+v (capture %v); want Istio's localhost:15053, /etc/resolv.conf, 5s, off", c.DNS, c.DNSCapture())
	}
	if c.XDS.Host() != "hub.example" {
		t.Errorf("server name %q; want the host of xds.address", c.XDS.Host())
	}
}

// TestDNSCapture: proxyMetadata ISTIO_META_DNS_CAPTURE true turns the DNS
// proxy on for an Envoy sidecar only.
func TestDNSCapture(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--proxy-metadata", `{"ISTIO_META_DNS_CAPTURE":"true"}`}, true},
		{[]string{"--proxy-metadata", `{"ISTIO_META_DNS_CAPTURE":"1"}`}, true},
		{[]string{"--proxy-metadata", `{"ISTIO_META_DNS_CAPTURE":"false"}`}, false},
		{[]string{"--proxy-metadata", `{"ISTIO_META_DNS_CAPTURE":"yes"}`}, false},
		{[]string{"--proxy-metadata", `{"ISTIO_META_DNS_CAPTURE":"true"}`, "--mode", "grpc"}, false},
		{[]string{"--proxy-metadata", `{"ISTIO_META_DNS_CAPTURE":"true"}`, "--proxy-type", "router"}, false},
	} {
		var cfg Config
		if err := settings.Load(Program, &cfg, podArgs(c.args...), &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if cfg.DNSCapture() != c.want {
			t.Errorf("%v: DNS capture %v, want %v", c.args, cfg.DNSCapture(), c.want)
		}
	}
}

func TestValidationNamesTheKey(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "sidecar"}, "mode: must be envoy or grpc"},
		{[]string{"--proxy-type", "gateway"}, "proxyType: must be sidecar or router"},
		{[]string{"--mode", "grpc", "--proxy-type", "router"}, "proxyType: router is an Envoy gateway's"},
		{[]string{"--pod.namespace", "Shop"}, "pod.namespace"},
		{[]string{"--pod.service-account", "Web_1"}, "pod.serviceAccount"},
		{[]string{"--pod.ip", "10.0.0"}, "pod.ip"},
		{[]string{"--ra.address", "spoke"}, "ra.address"},
		{[]string{"--ra.identity", "spiffe://cluster.local/ns/a/sa/b"}, "ra.identity"},
		{[]string{"--ra.identity", "spiffe://other.example/nave/cluster/c1"}, "ra.identity: \"spiffe://other.example/nave/cluster/c1\" is of trust domain"},
		{[]string{"--ra.renew-fraction", "0.8", "--ra.renew-jitter", "0.3"}, "ra.renewFraction"},
		{[]string{"--ra.retry-max", "10ms"}, "ra.retryMax"},
		{[]string{"--ra.cert-ttl", "10ms"}, "ra.certTTL"},
		{[]string{"--trust.mesh-roots", "not pem"}, "trust.meshRoots: holds no PEM certificate"},
		{[]string{"--trust.hub-ca", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}, "trust.hubCA: holds a PEM \"PRIVATE KEY\" block"},
		{[]string{"--xds.fallback-address", "spoke"}, "xds.fallbackAddress"},
		{[]string{"--xds.server-name", "hub:15010"}, "xds.serverName"},
		{[]string{"--xds.replicas", "nave-hub-0"}, "xds.replicas"},
		{[]string{"--xds.replicas", "nave-hub-0=10.0.0.1:15012,nave-hub-0=10.0.0.2:15012"}, "xds.replicas: replica \"nave-hub-0\" is named twice"},
		{[]string{"--envoy.admin-port", "0"}, "envoy.adminPort"},
		{[]string{"--envoy.ready-port", "15000"}, "envoy.readyPort"},
		{[]string{"--trust-domain", "Cluster.Local"}, "trustDomain"},
		{[]string{"--status.listen", "15021"}, "status.listen"},
		{[]string{"--app-probes", "{"}, "appProbes: not a JSON object"},
		{[]string{"--dns.address", "15053"}, "dns.address"},
		{[]string{"--dns.upstream-timeout", "0s"}, "dns.upstreamTimeout"},
		{[]string{"--app-probes", `{"/app-health/web/livez":{"httpGet":{"port":8080,"host":"10.0.0.9"}}}`}, "appProbes: probe \"/app-health/web/livez\": httpGet.host"},
	} {
		var cfg Config
		err := settings.Load(Program, &cfg, podArgs(c.args...), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v; want one naming %q", c.args, err, c.want)
		}
	}
	var cfg Config
	if err := settings.Load(Program, &cfg, nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "ra.address") || !strings.Contains(err.Error(), "pod.name") {
		t.Errorf("no settings: %v; want the required keys named", err)
	}
}
