package meshconfig

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// decodeOne decodes a stream that must hold exactly one valid object.
func decodeOne(t *testing.T, data, origin string) *Object {
	t.Helper()
	objs, errs := DecodeYAML([]byte(data), origin)
	for _, e := range errs {
		t.Errorf("unexpected error: %v", e)
	}
	if len(objs) != 1 {
		t.Fatalf("got %d objects, want 1", len(objs))
	}
	return objs[0]
}

// decodeErr decodes a stream that must hold exactly one bad document.
func decodeErr(t *testing.T, data string) *ObjectError {
	t.Helper()
	objs, errs := DecodeYAML([]byte(data), "in.yaml")
	if len(objs) != 0 {
		t.Errorf("got %d objects, want none", len(objs))
	}
	if len(errs) != 1 {
		t.Fatalf("got %d errors %v, want 1", len(errs), errs)
	}
	return errs[0]
}

var versionRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

func TestDecodeEveryKindFromExamples(t *testing.T) {
	tests := []struct {
		file, kind, key string
		check           func(t *testing.T, o *Object)
	}{
		{"virtualservice.yaml", "VirtualService", "bookinfo/reviews-route", func(t *testing.T, o *Object) {
			vs := o.Spec.(*networkingv1alpha3.VirtualService)
			if got := vs.GetHttp()[1].GetRoute()[1].GetWeight(); got != 10 {
				t.Errorf("weight = %d, want 10", got)
			}
			if got := vs.GetHttp()[0].GetTimeout().AsDuration(); got != 5*time.Second {
				t.Errorf("timeout = %v, want 5s", got)
			}
			if got := o.Annotations["example.com/owner"]; got != "team-a" {
				t.Errorf("annotation = %q", got)
			}
			if want := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC); !o.CreationTime.Equal(want) {
				t.Errorf("creation time = %v, want %v", o.CreationTime, want)
			}
		}},
		{"destinationrule.yaml", "DestinationRule", "bookinfo/reviews-destination", func(t *testing.T, o *Object) {
			dr := o.Spec.(*networkingv1alpha3.DestinationRule)
			if got := len(dr.GetSubsets()); got != 2 {
				t.Errorf("subsets = %d, want 2", got)
			}
			if got := dr.GetTrafficPolicy().GetOutlierDetection().GetConsecutive_5XxErrors().GetValue(); got != 7 {
				t.Errorf("consecutive5xxErrors = %d, want 7", got)
			}
		}},
		{"gateway.yaml", "Gateway", "istio-ingress/bookinfo-gateway", func(t *testing.T, o *Object) {
			gw := o.Spec.(*networkingv1alpha3.Gateway)
			if got := gw.GetServers()[1].GetTls().GetCredentialName(); got != "bookinfo-cert" {
				t.Errorf("credentialName = %q", got)
			}
		}},
		{"serviceentry.yaml", "ServiceEntry", "egress/external-svc-mongocluster", func(t *testing.T, o *Object) {
			se := o.Spec.(*networkingv1alpha3.ServiceEntry)
			if se.GetResolution() != networkingv1alpha3.ServiceEntry_STATIC || len(se.GetEndpoints()) != 2 {
				t.Errorf("resolution %v, %d endpoints", se.GetResolution(), len(se.GetEndpoints()))
			}
		}},
		{"workloadentry.yaml", "WorkloadEntry", "bookinfo/details-svc", func(t *testing.T, o *Object) {
			if got := o.Spec.(*networkingv1alpha3.WorkloadEntry).GetPorts()["http"]; got != 9080 {
				t.Errorf("port = %d", got)
			}
		}},
		{"workloadgroup.yaml", "WorkloadGroup", "bookinfo/reviews", func(t *testing.T, o *Object) {
			if got := o.Spec.(*networkingv1alpha3.WorkloadGroup).GetProbe().GetHttpGet().GetPort(); got != 3100 {
				t.Errorf("probe port = %d", got)
			}
		}},
		{"envoyfilter.yaml", "EnvoyFilter", "prod-us1/reviews-lua", func(t *testing.T, o *Object) {
			ef := o.Spec.(*networkingv1alpha3.EnvoyFilter)
			if ef.GetPriority() != 10 || ef.GetConfigPatches()[0].GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE {
				t.Errorf("spec = %v", ef)
			}
		}},
		{"sidecar.yaml", "Sidecar", "prod-us1/ratings", func(t *testing.T, o *Object) {
			if got := len(o.Spec.(*networkingv1alpha3.Sidecar).GetEgress()[1].GetHosts()); got != 4 {
				t.Errorf("egress hosts = %d", got)
			}
		}},
		{"peerauthentication.yaml", "PeerAuthentication", "foo/finance", func(t *testing.T, o *Object) {
			pa := o.Spec.(*securityv1beta1.PeerAuthentication)
			if got := pa.GetPortLevelMtls()[8080].GetMode(); got != securityv1beta1.PeerAuthentication_MutualTLS_DISABLE {
				t.Errorf("port 8080 mode = %v", got)
			}
		}},
		{"requestauthentication.yaml", "RequestAuthentication", "foo/httpbin", func(t *testing.T, o *Object) {
			if got := o.Spec.(*securityv1beta1.RequestAuthentication).GetJwtRules()[0].GetIssuer(); got != "issuer-foo" {
				t.Errorf("issuer = %q", got)
			}
		}},
		{"authorizationpolicy.yaml", "AuthorizationPolicy", "foo/httpbin", func(t *testing.T, o *Object) {
			ap := o.Spec.(*securityv1beta1.AuthorizationPolicy)
			if got := ap.GetRules()[0].GetTo()[0].GetOperation().GetPaths(); len(got) != 1 || got[0] != "/info*" {
				t.Errorf("paths = %v", got)
			}
		}},
		{"gatewayclass.yaml", "GatewayClass", "default/nave", func(t *testing.T, o *Object) {
			if got := gatewayAPISpec[gatewayv1.GatewayClassSpec](t, o).ControllerName; got != "nave.io/gateway-controller" {
				t.Errorf("controllerName = %q", got)
			}
		}},
		{"kubernetesgateway.yaml", "KubernetesGateway", "edge/shop", func(t *testing.T, o *Object) {
			gw := gatewayAPISpec[gatewayv1.GatewaySpec](t, o)
			if got := gw.Listeners[1].TLS.CertificateRefs[0].Name; len(gw.Listeners) != 2 || got != "shop-cert" {
				t.Errorf("listeners %d, certificateRef %q", len(gw.Listeners), got)
			}
		}},
		{"httproute.yaml", "HTTPRoute", "shop/shop", func(t *testing.T, o *Object) {
			r := gatewayAPISpec[gatewayv1.HTTPRouteSpec](t, o)
			if got := *r.Rules[0].BackendRefs[1].Weight; got != 90 {
				t.Errorf("weight = %d, want 90", got)
			}
		}},
		{"grpcroute.yaml", "GRPCRoute", "apps/greeter", func(t *testing.T, o *Object) {
			r := gatewayAPISpec[gatewayv1.GRPCRouteSpec](t, o)
			if got := *r.Rules[0].Matches[0].Method.Method; got != "SayHello" {
				t.Errorf("method = %q", got)
			}
		}},
		{"tcproute.yaml", "TCPRoute", "data/db", func(t *testing.T, o *Object) {
			if got := gatewayAPISpec[gatewayv1.TCPRouteSpec](t, o).Rules[0].BackendRefs[0].Name; got != "postgres" {
				t.Errorf("backend = %q", got)
			}
		}},
		{"tlsroute.yaml", "TLSRoute", "shop/passthrough", func(t *testing.T, o *Object) {
			if got := gatewayAPISpec[gatewayv1.TLSRouteSpec](t, o).Hostnames; len(got) != 1 || got[0] != "secure.example.com" {
				t.Errorf("hostnames = %v", got)
			}
		}},
		{"referencegrant.yaml", "ReferenceGrant", "certs/edge-gateways", func(t *testing.T, o *Object) {
			if got := gatewayAPISpec[gatewayv1.ReferenceGrantSpec](t, o).To[0].Kind; got != "Secret" {
				t.Errorf("to kind = %q", got)
			}
		}},
		{"telemetry.yaml", "Telemetry", "istio-system/mesh-default", func(t *testing.T, o *Object) {
			tel := o.Spec.(*telemetryv1alpha1.Telemetry)
			if got := tel.GetTracing()[0].GetRandomSamplingPercentage().GetValue(); got != 10 {
				t.Errorf("randomSamplingPercentage = %v", got)
			}
			if got := tel.GetMetrics()[0].GetOverrides()[0].GetTagOverrides()["request_host"].GetOperation(); got != telemetryv1alpha1.MetricsOverrides_TagOverride_REMOVE {
				t.Errorf("tagOverrides operation = %v", got)
			}
		}},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "examples", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			o := decodeOne(t, string(data), tt.file)
			if o.Kind.Kind != tt.kind {
				t.Errorf("kind = %s, want %s", o.Kind.Kind, tt.kind)
			}
			if o.Key() != tt.key {
				t.Errorf("key = %s, want %s", o.Key(), tt.key)
			}
			if !versionRE.MatchString(o.Version) || o.Version != o.ComputeVersion() {
				t.Errorf("version = %q, want the 16-hex content hash %q", o.Version, o.ComputeVersion())
			}
			if want := tt.file + "#0"; o.Origin != want {
				t.Errorf("origin = %q, want %q", o.Origin, want)
			}
			if err := Validate(o); err != nil {
				t.Errorf("decoded object does not validate: %v", err)
			}
			tt.check(t, o)
			seen[tt.kind] = true
		})
	}
	for _, k := range Kinds() {
		if !k.Registry && !seen[k.Kind] {
			t.Errorf("kind %s has no example", k.Kind)
		}
	}
}

func TestDecodeAcceptsEveryAPIVersion(t *testing.T) {
	for _, k := range Kinds() {
		if k.Registry {
			continue
		}
		for _, v := range k.Versions {
			doc := "apiVersion: " + k.Group + "/" + v + "\nkind: " + k.APIKind + "\nmetadata: {name: x}\n"
			_, errs := DecodeYAML([]byte(doc), "in.yaml")
			// An empty spec may fail validation, never kind resolution.
			for _, e := range errs {
				if !strings.HasPrefix(e.Field, "spec") {
					t.Errorf("%s/%s %s: %v", k.Group, v, k.Kind, e)
				}
			}
		}
	}
}

func TestDecodeDocumentErrors(t *testing.T) {
	const vsHead = "apiVersion: networking.istio.io/v1\nkind: VirtualService\n"
	const okSpec = "spec:\n  hosts: [r]\n  http:\n  - route:\n    - destination: {host: r}\n"
	tests := []struct {
		name, doc   string
		field, kind string
		reason      string // substring
	}{
		{"scalar document", "just a string\n", "", "", "document is a string, not a mapping"},
		{"list document", "- a\n- b\n", "", "", "document is a list, not a mapping"},
		{"number document", "42\n", "", "", "document is a number, not a mapping"},
		{"binary", "\x00\x01\xff\xfe garbage", "", "", "not UTF-8"},
		{"control characters", "a: \x00\x01\n", "", "", "invalid YAML"},
		{"broken YAML", "a: b\nc: d: e\n", "", "", "invalid YAML: line 2"},
		{"tab indentation", "a:\n\tb: c\n", "", "", "invalid YAML: line 2"},
		{"duplicate key", vsHead + "metadata: {name: a}\nmetadata: {name: b}\n", "", "", "line 4: a key is repeated in one mapping"},
		{"unknown top-level key", vsHead + "metadata: {name: r}\nspc: {}\n", "spc", "VirtualService", `unknown field "spc"`},
		{"missing apiVersion", "kind: VirtualService\nmetadata: {name: r}\n", "apiVersion", "VirtualService", "apiVersion is required"},
		{"kind a mapping", "apiVersion: networking.istio.io/v1\nkind: {a: b}\nmetadata: {name: r}\n", "kind", "", "kind must be a string, not a mapping"},
		{"apiVersion not a string", "apiVersion: 3\nkind: VirtualService\nmetadata: {name: r}\n", "apiVersion", "VirtualService", "must be a string"},
		{"missing kind", "apiVersion: networking.istio.io/v1\nmetadata: {name: r}\n", "kind", "", "kind is required"},
		{"unknown kind of an unknown group", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: r}\n", "kind", "", "line 1: not a config object: its kind is not one nave accepts (VirtualService, "},
		{"unknown group", "apiVersion: example.com/v1\nkind: VirtualService\nmetadata: {name: r}\n", "", "VirtualService", `apiVersion "example.com/v1" is not supported`},
		{"unknown version", "apiVersion: networking.istio.io/v2\nkind: VirtualService\nmetadata: {name: r}\n", "", "VirtualService", `apiVersion "networking.istio.io/v2" is not supported for VirtualService`},
		{"security v1alpha3", "apiVersion: security.istio.io/v1alpha3\nkind: AuthorizationPolicy\nmetadata: {name: r}\n", "", "AuthorizationPolicy", "supported versions: v1, v1beta1"},
		{"unknown kind", "apiVersion: networking.istio.io/v1alpha3\nkind: ProxyConfig\nmetadata: {name: r}\n", "", "ProxyConfig", "ProxyConfig is not supported: give a proxy's settings in the mesh's MeshConfig defaultConfig"},
		{"WasmPlugin", "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: r}\n", "", "WasmPlugin", "WasmPlugin is not supported: nave's agent does not fetch Wasm modules"},
		{"kubernetes kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: r}\ndata: {a: b}\n", "kind", "", "not a config object"},
		{"registry Service", "apiVersion: nave.io/v1\nkind: Service\nmetadata: {name: r}\nspec: {hostname: r.default.svc}\n", "", "Service", "produced by the spoke's registry, not accepted in config files"},
		{"registry Workload", "apiVersion: nave.io/v1\nkind: Workload\nmetadata: {name: r}\nspec: {address: 10.0.0.1}\n", "", "Workload", "produced by the spoke's registry"},
		{"missing metadata", vsHead + okSpec, "metadata.name", "VirtualService", "name is required"},
		{"missing name", vsHead + "metadata: {namespace: a}\n" + okSpec, "metadata.name", "VirtualService", "name is required"},
		{"boolean name", vsHead + "metadata: {name: y}\n" + okSpec, "metadata.name", "VirtualService", "not a boolean (quote it"},
		{"metadata not a mapping", vsHead + "metadata: [a]\n" + okSpec, "metadata", "VirtualService", "must be a mapping"},
		{"unknown metadata field", vsHead + "metadata: {name: r, lables: {a: b}}\n" + okSpec, "metadata.lables", "VirtualService", `unknown field "lables"`},
		{"label not a string", vsHead + "metadata: {name: r, labels: {version: 1}}\n" + okSpec, "metadata.labels[version]", "VirtualService", "must be a string"},
		{"bad creationTimestamp", vsHead + "metadata: {name: r, creationTimestamp: yesterday}\n" + okSpec, "metadata.creationTimestamp", "VirtualService", "not an RFC 3339 time"},
		{"unknown spec field", vsHead + "metadata: {name: r}\nspec:\n  hosts: [r]\n  htp: []\n", "spec.htp", "VirtualService", `unknown field "htp"`},
		{"unknown nested spec field", vsHead + "metadata: {name: r}\nspec:\n  hosts: [r]\n  http:\n  - route:\n    - destination: {host: r, subsett: v1}\n", "spec.http[0].route[0].destination.subsett", "VirtualService", `unknown field "subsett"`},
		{"unknown field in map value", "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p}\nspec:\n  portLevelMtls:\n    8080: {mod: STRICT}\n", "spec.portLevelMtls[8080].mod", "PeerAuthentication", `unknown field "mod"`},
		{"wrong scalar type", vsHead + "metadata: {name: r}\nspec:\n  hosts: [r]\n  http:\n  - route:\n    - destination: {host: r}\n      weight: heavy\n", "spec.http[0].route[0].weight", "VirtualService", "invalid value for int32 field weight"},
		{"huge number", vsHead + "metadata: {name: r}\nspec:\n  hosts: [r]\n  http:\n  - route:\n    - destination: {host: r}\n      weight: 99999999999999999999999\n", "spec.http[0].route[0].weight", "VirtualService", "invalid value for int32 field weight"},
		{"bad duration", vsHead + "metadata: {name: r}\nspec:\n  hosts: [r]\n  http:\n  - timeout: 5 seconds\n    route:\n    - destination: {host: r}\n", "spec.http[0].timeout", "VirtualService", "Duration"},
		{"bad enum", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\nspec:\n  host: r\n  trafficPolicy: {loadBalancer: {simple: FASTEST}}\n", "spec.trafficPolicy.loadBalancer.simple", "DestinationRule", `"FASTEST"`},
		{"two StringMatch fields", vsHead + "metadata: {name: r}\nspec:\n  hosts: [r]\n  http:\n  - match: [{uri: {prefix: /a, exact: /b}}]\n    route:\n    - destination: {host: r}\n", "spec.http[0].match[0].uri", "VirtualService", "set only one"},
		{"spec not a mapping", vsHead + "metadata: {name: r}\nspec: [a]\n", "spec", "VirtualService", ""},
		{"negative uint", "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: w}\nspec: {address: 1.2.3.4, weight: -1}\n", "spec.weight", "WorkloadEntry", "invalid value for uint32 field weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := decodeErr(t, tt.doc)
			if e.Field != tt.field {
				t.Errorf("field = %q, want %q (%v)", e.Field, tt.field, e)
			}
			if e.Kind != tt.kind {
				t.Errorf("kind = %q, want %q", e.Kind, tt.kind)
			}
			if !strings.Contains(e.Reason, tt.reason) {
				t.Errorf("reason = %q, want it to contain %q", e.Reason, tt.reason)
			}
			if e.Origin != "in.yaml" || e.Index != 0 {
				t.Errorf("origin %q index %d, want in.yaml 0", e.Origin, e.Index)
			}
			if strings.Contains(e.Reason, "proto:") || strings.Contains(e.Reason, "(line 1:") {
				t.Errorf("reason %q leaks protojson's prefix or JSON position", e.Reason)
			}
		})
	}
}

func TestDecodeBoundsReasons(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	for _, doc := range []string{
		vsHTTP("- route: [{destination: {host: r}, weight: " + huge + "}]"),
		vs("hosts: [" + huge + "]\nhttp: [{route: [{destination: {host: r}}]}]"),
	} {
		e := decodeErr(t, doc)
		if len(e.Reason) > maxReason+len("…") || !strings.HasSuffix(e.Reason, "…") {
			t.Errorf("reason is %d bytes, want it cut to %d", len(e.Reason), maxReason)
		}
	}
}

func TestDecodeNamesErrorsWithMetadata(t *testing.T) {
	e := decodeErr(t, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: shop}\nspec: {hosts: [r], htp: []}\n")
	if e.Namespace != "shop" || e.Name != "reviews" {
		t.Errorf("error names %s/%s, want shop/reviews", e.Namespace, e.Name)
	}
	if got, want := e.Error(), `in.yaml#0 VirtualService shop/reviews: spec.htp: unknown field "htp"`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestDecodeMultiDocumentKeepsGoodDocuments(t *testing.T) {
	stream := `# routes for the shop
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: one}
spec:
  hosts: [one]
  http: [{route: [{destination: {host: one}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: two}
spec:
  hosts: [two]
  http: [{route: [{destination: {host: two}, weight: 50}, {destination: {host: two-b}, weight: 40}]}]
---
this: is: not: yaml
---

---
# only a comment
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: three, namespace: shop}
spec: {host: three}
`
	objs, errs := DecodeYAML([]byte(stream), "shop.yaml")
	var keys, origins []string
	for _, o := range objs {
		keys = append(keys, o.Key())
		origins = append(origins, o.Origin)
	}
	if got, want := strings.Join(keys, ","), "default/one,shop/three"; got != want {
		t.Errorf("objects = %s, want %s", got, want)
	}
	if got, want := strings.Join(origins, ","), "shop.yaml#0,shop.yaml#5"; got != want {
		t.Errorf("origins = %s, want %s", got, want)
	}
	if len(errs) != 2 {
		t.Fatalf("errors = %v, want 2", errs)
	}
	if got, want := errs[0].Error(), "shop.yaml#1 VirtualService default/two: spec.http[0].route: weights sum to 90, want 100"; got != want {
		t.Errorf("first error = %q, want %q", got, want)
	}
	if errs[1].Index != 2 || !strings.Contains(errs[1].Reason, "invalid YAML: line 16") {
		t.Errorf("second error = %v, want document 2, invalid YAML at line 16 of the file", errs[1])
	}
}

func TestDecodeDefaultsAndEmptyStreams(t *testing.T) {
	for _, in := range []string{"", "\n\n", "# nothing\n", "---\n---\n", "---\n# c\n...\n", "null\n", "~\n"} {
		objs, errs := DecodeYAML([]byte(in), "e.yaml")
		if len(objs) != 0 || len(errs) != 0 {
			t.Errorf("%q: got %d objects and errors %v, want nothing", in, len(objs), errs)
		}
	}
	o := decodeOne(t, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: null}\nspec: {host: d}\nstatus: {conditions: []}\n", "d.yaml")
	if o.Namespace != DefaultNamespace {
		t.Errorf("namespace = %q, want %q", o.Namespace, DefaultNamespace)
	}
	// Fields of an exported Kubernetes object are ignored.
	decodeOne(t, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: d\n  uid: 0b0b\n  resourceVersion: \"12\"\n  generation: 3\n  managedFields: []\nspec: {host: d}\n", "d.yaml")
}

func TestVersionIsAContentHash(t *testing.T) {
	const base = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: %s\n  labels: {a: \"1\", b: \"2\"}\nspec:\n  host: reviews\n  subsets: [{name: v1, labels: {version: v1, tier: web}}]\n"
	v := func(doc string) string { return decodeOne(t, doc, "v.yaml").Version }
	same := v(strings.Replace(base, "%s", "one", 1))
	if got := v(strings.Replace(base, "%s", "two", 1)); got != same {
		t.Errorf("renaming changed the version: %s vs %s", got, same)
	}
	reordered := strings.Replace(strings.Replace(base, "%s", "one", 1), "{a: \"1\", b: \"2\"}", "{b: \"2\", a: \"1\"}", 1)
	reordered = strings.Replace(reordered, "{version: v1, tier: web}", "{tier: web, version: v1}", 1)
	if got := v(reordered); got != same {
		t.Errorf("reordering map keys changed the version: %s vs %s", got, same)
	}
	if got := v(strings.Replace(strings.Replace(base, "%s", "one", 1), "b: \"2\"", "b: \"3\"", 1)); got == same {
		t.Error("changing a label kept the version")
	}
	if got := v(strings.Replace(strings.Replace(base, "%s", "one", 1), "host: reviews", "host: ratings", 1)); got == same {
		t.Error("changing the spec kept the version")
	}
	withAnnotation := strings.Replace(strings.Replace(base, "%s", "one", 1), "  labels:", "  annotations: {note: x}\n  labels:", 1)
	if got := v(withAnnotation); got == same {
		t.Error("adding an annotation kept the version")
	}
}

func TestObjectErrorFormat(t *testing.T) {
	tests := []struct {
		err  ObjectError
		want string
	}{
		{ObjectError{Origin: "examples/vs.yaml", Index: 1, Kind: "VirtualService", Namespace: "default", Name: "reviews", Field: "spec.http[0].route", Reason: "weights sum to 90, want 100"},
			"examples/vs.yaml#1 VirtualService default/reviews: spec.http[0].route: weights sum to 90, want 100"},
		{ObjectError{Origin: "a.yaml", Index: 3, Reason: "document is a list, not a mapping"}, "a.yaml#3: document is a list, not a mapping"},
		{ObjectError{Origin: "a.yaml#2", Index: -1, Kind: "Gateway", Name: "gw", Reason: "bad"}, "a.yaml#2 Gateway gw: bad"},
		{ObjectError{Index: -1, Reason: "bad"}, "bad"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// TestDecodeNeverQuotesForeignDocuments: a document that is not a config
// object of a known kind may be any file (a key, a token, a kubeconfig),
// so nothing of it may appear in its error, only where it is and why.
func TestDecodeNeverQuotesForeignDocuments(t *testing.T) {
	const secret = "sk_live_51HxQsecret"
	docs := map[string]string{
		"top-level key":          secret + ": 1\n",
		"env file":               "API_TOKEN=" + secret + "\n",
		"kubernetes Secret":      "apiVersion: v1\nkind: Secret\nmetadata: {name: " + secret + ", namespace: " + secret + "}\ndata: {token: " + secret + "}\n",
		"kind":                   "apiVersion: example.com/v1\nkind: " + secret + "\nmetadata: {name: a}\n",
		"apiVersion":             "apiVersion: " + secret + "\nkind: Widget\n",
		"json key file":          `{"type": "service_account", "private_key_id": "` + secret + `", "` + secret + `": 1}` + "\n",
		"metadata only":          "metadata: {name: " + secret + "}\n",
		"duplicate key":          secret + ": 1\n" + secret + ": 2\n",
		"duplicate nested key":   "a:\n  " + secret + ": 1\n  " + secret + ": 2\n",
		"tag mismatch":           "a: !!int " + secret + "\n",
		"bad binary":             "a: !!binary " + secret + "!!\n",
		"unknown anchor":         "a: *" + secret + "\n",
		"anchor contains itself": "a: &" + secret + " [*" + secret + "]\n",
		"list as key":            "? [" + secret + "]\n: v\n",
		"mapping as key":         "? {" + secret + ": 1}\n: v\n",
		"not UTF-8":              secret + ": \xff\xfe\n",
		"pem":                    "-----BEGIN PRIVATE KEY-----\n" + secret + "\n-----END PRIVATE KEY-----\n",
		"broken flow":            "{" + secret + ": [1, 2\n",
		"tab":                    "a:\n\t" + secret + ": 1\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			objs, errs := DecodeYAML([]byte(doc), "in.yaml")
			if len(objs) != 0 || len(errs) != 1 {
				t.Fatalf("got %d objects and errors %v, want one error", len(objs), errs)
			}
			e := errs[0]
			if strings.Contains(e.Error(), secret) || strings.Contains(e.Field, secret) || strings.Contains(e.Kind+e.Namespace+e.Name, secret) {
				t.Errorf("error quotes the document: %#v", e)
			}
			if !regexp.MustCompile(`\bline [0-9]+\b`).MatchString(e.Reason) {
				t.Errorf("reason %q does not give the line", e.Reason)
			}
		})
	}
}

// Documents of other APIs (a Deployment, a Kubernetes Service) are marked
// Foreign, so that a tool reading manifests may skip them; mistaken config
// (a typo in an Istio kind, a nave kind with a wrong group) is not.
func TestForeignDocuments(t *testing.T) {
	for _, c := range []struct {
		doc     string
		foreign bool
	}{
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n", true},
		{"apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: b}\n", true},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", true},
		{"apiVersion: networking.istio.io/v1\nkind: VirtualSevice\nmetadata: {name: a}\n", false},
		{"apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: a}\n", false},
		{"apiVersion: example.com/v1\nkind: VirtualService\nmetadata: {name: a}\n", true},
		{"kind: Deployment\n", false},
		{"apiVersion: nave.io/v1\nkind: Workload\nmetadata: {name: a}\n", false},
	} {
		_, errs := DecodeYAML([]byte(c.doc), "f.yaml")
		if len(errs) != 1 || errs[0].Foreign != c.foreign {
			t.Errorf("%q: errors %v; want one with Foreign %v", c.doc, errs, c.foreign)
		}
	}
	_, errs := DecodeYAML([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: b}\n"), "f.yaml")
	if e := errs[0]; e.Kind != "Service" || e.Name != "a" || e.Namespace != "b" {
		t.Errorf("a Kubernetes Service's error names %s %s/%s; want Service b/a", e.Kind, e.Namespace, e.Name)
	}
}

// gatewayAPISpec returns the Gateway API spec of o, of type T.
func gatewayAPISpec[T any](t *testing.T, o *Object) *T {
	t.Helper()
	spec, err := GatewayAPISpec(o)
	if err != nil {
		t.Fatal(err)
	}
	typed, ok := spec.(*T)
	if !ok {
		t.Fatalf("spec is a %T", spec)
	}
	return typed
}
