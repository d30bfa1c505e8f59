package meshconfig

import (
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// TestMeshConfigFieldsComplete: every MeshConfig field of the API is
// listed once in MeshConfigFields, so none can be silently ignored.
func TestMeshConfigFieldsComplete(t *testing.T) {
	fields := (&meshv1alpha1.MeshConfig{}).ProtoReflect().Descriptor().Fields()
	var api []string
	for i := range fields.Len() {
		api = append(api, fields.Get(i).JSONName())
	}
	var listed []string
	for _, f := range MeshConfigFields {
		if slices.Contains(listed, f.Name) {
			t.Errorf("%s is listed twice", f.Name)
		}
		listed = append(listed, f.Name)
		if !slices.Contains(api, f.Name) {
			t.Errorf("%s is listed but not a MeshConfig field", f.Name)
		}
		if f.Reason == "" {
			t.Errorf("%s has no reason", f.Name)
		}
	}
	for _, n := range api {
		if !slices.Contains(listed, n) {
			t.Errorf("MeshConfig field %s is not listed in MeshConfigFields", n)
		}
	}
}

func TestValidateMeshConfig(t *testing.T) {
	cases := []struct {
		name, yaml, err string // err "" = valid
	}{
		{"empty", ``, ""},
		{"supported fields", `
rootNamespace: mesh-root
trustDomain: m1.example
trustDomainAliases: [old.example, older.example]
outboundTrafficPolicy: {mode: REGISTRY_ONLY}
enableAutoMtls: false
connectTimeout: 2.5s
protocolDetectionTimeout: 100ms
defaultServiceExportTo: ["."]
defaultVirtualServiceExportTo: ["*", "shared"]
defaultDestinationRuleExportTo: ["~"]
localityLbSetting: {failover: [{from: r1, to: r2}]}
serviceSettings: [{settings: {clusterLocal: true}, hosts: ["*.local.svc.cluster.local", "db.data.svc.cluster.local"]}]
extensionProviders:
- name: authz
  envoyExtAuthzGrpc: {service: authz.sys.svc.cluster.local, port: 9000}
- name: otel
  opentelemetry: {service: otel.obs.svc.cluster.local, port: 4317}
defaultConfig: {terminationDrainDuration: 10s, holdApplicationUntilProxyStarts: true, proxyMetadata: {A: b}}
`, ""},
		{"not yet", "enableEnvoyAccessLogService: true", "meshConfig.enableEnvoyAccessLogService: not yet supported"},
		{"JSON access log format", "accessLogEncoding: JSON\naccessLogFormat: '[%START_TIME%]'", "meshConfig.accessLogFormat: with accessLogEncoding JSON the format must be a JSON object"},
		{"rejected", "caCertificates: [{pem: x}]", "meshConfig.caCertificates: rejected because"},
		{"rejected ports", "proxyListenPort: 15001", "meshConfig.proxyListenPort: rejected because"},
		{"every refused field named", "enableEnvoyAccessLogService: true\nconfigSources: [{address: x}]", "meshConfig.configSources: rejected because"},
		{"every refused field named (2)", "enableEnvoyAccessLogService: true\nconfigSources: [{address: x}]", "meshConfig.enableEnvoyAccessLogService: not yet supported"},
		{"bad root namespace", "rootNamespace: Istio_System", "meshConfig.rootNamespace:"},
		{"bad trust domain", "trustDomain: 'a b'", "meshConfig.trustDomain:"},
		{"duplicate alias", "trustDomainAliases: [a.example, a.example]", "meshConfig.trustDomainAliases[1]: \"a.example\" is already listed"},
		{"dynamic dns", "outboundTrafficPolicy: {mode: ALLOW_ANY_DYNAMIC_DNS}", "meshConfig.outboundTrafficPolicy.mode:"},
		{"egress tls", "outboundTrafficPolicy: {mode: ALLOW_ANY, tls: {mode: SIMPLE}}", "meshConfig.outboundTrafficPolicy.tls: not yet supported"},
		{"zero timeout", "connectTimeout: 0s", "meshConfig.connectTimeout:"},
		{"tiny timeout", "connectTimeout: 1us", "meshConfig.connectTimeout:"},
		{"tiny detection timeout", "protocolDetectionTimeout: 10us", "meshConfig.protocolDetectionTimeout: must be 0"},
		{"no detection timeout", "protocolDetectionTimeout: 0s", ""},
		{"bad export", "defaultServiceExportTo: [Bad_NS]", "meshConfig.defaultServiceExportTo[0]:"},
		{"nowhere and somewhere", "defaultDestinationRuleExportTo: ['~', '*']", "meshConfig.defaultDestinationRuleExportTo[0]:"},
		{"distribute sum", "localityLbSetting: {distribute: [{from: r1/*, to: {r1/*: 50}}]}", "meshConfig.localityLbSetting.distribute[0].to: weights sum to 50"},
		{"distribute and failover", "localityLbSetting: {distribute: [{from: r1/*, to: {r1/*: 100}}], failover: [{from: r1, to: r2}]}", "meshConfig.localityLbSetting: distribute and failover"},
		{"failover to itself", "localityLbSetting: {failover: [{from: r1, to: r1}]}", "meshConfig.localityLbSetting.failover[0]:"},
		{"service settings without hosts", "serviceSettings: [{settings: {clusterLocal: true}}]", "meshConfig.serviceSettings[0].hosts:"},
		{"service settings bad host", "serviceSettings: [{settings: {clusterLocal: true}, hosts: ['a b']}]", "meshConfig.serviceSettings[0].hosts[0]:"},
		{"provider without name", "extensionProviders: [{envoyExtAuthzGrpc: {service: a.b.svc.cluster.local, port: 1}}]", "meshConfig.extensionProviders[0].name:"},
		{"provider twice", "extensionProviders: [{name: a, prometheus: {}}, {name: a, prometheus: {}}]", "meshConfig.extensionProviders[1].name: provider \"a\" is already defined"},
		{"provider without kind", "extensionProviders: [{name: a}]", "meshConfig.extensionProviders[0]: provider \"a\" names no provider kind"},
		{"provider without service", "extensionProviders: [{name: a, envoyExtAuthzHttp: {port: 80}}]", "meshConfig.extensionProviders[0].envoyExtAuthzHttp.service: service is required"},
		{"provider without port", "extensionProviders: [{name: a, zipkin: {service: z.obs.svc.cluster.local}}]", "meshConfig.extensionProviders[0].zipkin.port:"},
		{"default config field not applied", "defaultConfig: {concurrency: 2}", "meshConfig.defaultConfig.concurrency: not yet supported"},
		{"proxy metadata of the agent's own config", "defaultConfig: {proxyMetadata: {NAVE_MESH: other}}", `meshConfig.defaultConfig.proxyMetadata: "NAVE_MESH": names of nave-agent's own configuration`},
		{"proxy metadata that is no env var", "defaultConfig: {proxyMetadata: {\"A=B\": x}}", `meshConfig.defaultConfig.proxyMetadata: "A=B": a name with '='`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseMeshConfig([]byte(tc.yaml))
			if err != nil {
				t.Fatalf("ParseMeshConfig: %v", err)
			}
			err = ValidateMeshConfig(cfg)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("ValidateMeshConfig: %v", err)
			case tc.err != "" && err == nil:
				t.Fatalf("ValidateMeshConfig accepted it; want an error containing %q", tc.err)
			case tc.err != "" && !strings.Contains(err.Error(), tc.err):
				t.Fatalf("ValidateMeshConfig = %q; want it to contain %q", err, tc.err)
			}
		})
	}
	if err := ValidateMeshConfig(nil); err != nil {
		t.Errorf("ValidateMeshConfig(nil) = %v", err)
	}
}

// FuzzParseMeshConfig feeds arbitrary documents to ParseMeshConfig and
// ValidateMeshConfig: they must never panic, an error names the
// MeshConfig (meshConfig…), and a parsed config survives a round trip
// through its own encoding. Seeds live in testdata/fuzz/FuzzParseMeshConfig.
func FuzzParseMeshConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseMeshConfig(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "meshConfig") {
				t.Fatalf("error %q does not name the meshConfig", err)
			}
			return
		}
		if cfg == nil {
			t.Fatal("nil MeshConfig without an error")
		}
		if err := ValidateMeshConfig(cfg); err != nil && !strings.HasPrefix(err.Error(), "meshConfig.") {
			t.Fatalf("validation error %q does not name a field", err)
		}
		b, err := proto.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back := &meshv1alpha1.MeshConfig{}
		if err := proto.Unmarshal(b, back); err != nil || !proto.Equal(cfg, back) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// TestMeshConfigFieldsDocumented: docs/api-support.md lists every
// MeshConfig field with the status MeshConfigFields gives it.
func TestMeshConfigFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api-support.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range MeshConfigFields {
		status := string(f.Support)
		if f.Support == NotYet {
			status = "not yet"
		}
		if row := "| `" + f.Name + "` | " + status + " | " + f.Reason + " |"; !strings.Contains(string(doc), row) {
			t.Errorf("docs/api-support.md lacks the row %s", row)
		}
	}
}

func TestValidateMeshConfigFor(t *testing.T) {
	for _, tc := range []struct {
		cfg *meshv1alpha1.MeshConfig
		ok  bool
	}{
		{nil, true},
		{&meshv1alpha1.MeshConfig{}, true},
		{&meshv1alpha1.MeshConfig{TrustDomain: "m1.example"}, true},
		{&meshv1alpha1.MeshConfig{TrustDomain: "other.example"}, false},
		{&meshv1alpha1.MeshConfig{TrustDomainAliases: []string{"other.example"}}, true},
		{&meshv1alpha1.MeshConfig{EnableEnvoyAccessLogService: true}, false},
	} {
		if err := ValidateMeshConfigFor(tc.cfg, "m1.example"); (err == nil) != tc.ok {
			t.Errorf("ValidateMeshConfigFor(%v) = %v, want ok %v", tc.cfg, err, tc.ok)
		}
	}
}
