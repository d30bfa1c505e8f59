package policy

import (
	"strconv"
	"strings"
	"testing"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
)

// telemetrySnap builds a mesh of the given Telemetry YAML under the
// MeshConfig cfg (YAML; "" = none).
func telemetrySnap(t *testing.T, cfg, objects string) *mesh.Snapshot {
	t.Helper()
	var mc *meshv1alpha1.MeshConfig
	if cfg != "" {
		var err error
		if mc, err = meshconfig.ParseMeshConfig([]byte(cfg)); err != nil {
			t.Fatal(err)
		}
		if err := meshconfig.ValidateMeshConfig(mc); err != nil {
			t.Fatal(err)
		}
	}
	b := &mesh.Builder{MeshConfig: mc}
	return b.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: gentest.Decode(t, objects)}})
}

const providers = `extensionProviders:
- {name: a, envoyFileAccessLog: {path: /a}}
- {name: b, envoyFileAccessLog: {path: /b}}
- {name: z, zipkin: {service: zipkin.obs.svc.cluster.local, port: 9411}}
- {name: o, opentelemetry: {service: otel.obs.svc.cluster.local, port: 4317}}
- {name: sd, stackdriver: {}}
`

func logNames(l []AccessLog) string {
	var names []string
	for _, a := range l {
		names = append(names, a.Provider.GetName())
	}
	return strings.Join(names, ",")
}

const (
	rootTel = "---\napiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: mesh, namespace: istio-system}\nspec:\n"
	nsTel   = "---\napiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: ns, namespace: shop}\nspec:\n"
	wlTel   = "---\napiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: wl, namespace: shop}\nspec:\n  selector: {matchLabels: {app: reviews}}\n"
	gwTel   = "---\napiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: gw, namespace: shop}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge}]\n"
)

var reviewsLabels = map[string]string{"app": "reviews"}

// TestTelemetryPrecedence: root namespace < namespace < workload
// (selector or targetRef), and MeshConfig defaultProviders where no
// Telemetry names a provider, as Istio merges them.
func TestTelemetryPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     string
		objects string
		labels  map[string]string
		client  string // access log providers, client side
		server  string // and server side
		tracing string // provider name and sampling, "" for none
		metrics string // metrics providers (client side)
		problem string // a reported problem contains this
	}{
		{name: "nothing: Istio's default metrics only", cfg: providers, metrics: "prometheus"},
		{name: "defaultProviders", cfg: providers + "defaultProviders: {accessLogging: [a], tracing: [z]}", client: "a", server: "a", tracing: "z@1"},
		{name: "root namespace", cfg: providers, objects: rootTel + "  accessLogging: [{providers: [{name: a}]}]\n  tracing: [{providers: [{name: z}], randomSamplingPercentage: 5}]\n",
			client: "a", server: "a", tracing: "z@5", metrics: "prometheus"},
		{name: "namespace overrides the root's provider and sampling", cfg: providers,
			objects: rootTel + "  accessLogging: [{providers: [{name: a}]}]\n  tracing: [{providers: [{name: z}], randomSamplingPercentage: 5}]\n" +
				nsTel + "  accessLogging: [{providers: [{name: b}]}]\n  tracing: [{randomSamplingPercentage: 20}]\n",
			client: "b", server: "b", tracing: "z@20", metrics: "prometheus"},
		{name: "workload selector beats the namespace", cfg: providers,
			objects: nsTel + "  accessLogging: [{providers: [{name: b}]}]\n  tracing: [{providers: [{name: z}]}]\n" +
				wlTel + "  tracing: [{providers: [{name: o}], randomSamplingPercentage: 100}]\n  accessLogging: [{providers: [{name: a}]}]\n",
			labels: reviewsLabels, client: "a", server: "a", tracing: "o@100", metrics: "prometheus"},
		{name: "a selector that does not match changes nothing", cfg: providers,
			objects: nsTel + "  tracing: [{providers: [{name: z}]}]\n" + wlTel + "  tracing: [{providers: [{name: o}]}]\n",
			labels:  map[string]string{"app": "ratings"}, tracing: "z@1", metrics: "prometheus"},
		{name: "targetRef to a Gateway selects its deployment", cfg: providers,
			objects: nsTel + "  tracing: [{providers: [{name: z}]}]\n" + gwTel + "  tracing: [{providers: [{name: o}]}]\n",
			labels:  map[string]string{meshconfig.GatewayNameLabel: "edge"}, tracing: "o@1", metrics: "prometheus"},
		{name: "disabled by mode at the workload", cfg: providers + "defaultProviders: {accessLogging: [a]}",
			objects: wlTel + "  accessLogging: [{match: {mode: SERVER}, disabled: true}]\n",
			labels:  reviewsLabels, client: "", server: ""},
		// Istio's rule: a level that names providers for a side narrows
		// that side's providers to those it names, so disabling b for the
		// server leaves the server without a (not named at that level).
		{name: "disabled for the server side only, providers named", cfg: providers,
			objects: rootTel + "  accessLogging: [{providers: [{name: a}, {name: b}]}]\n" + wlTel + "  accessLogging: [{providers: [{name: b}], match: {mode: SERVER}, disabled: true}]\n",
			labels:  reviewsLabels, client: "a,b", server: "", metrics: "prometheus"},
		{name: "disabled for the server side only, no providers named", cfg: providers,
			objects: rootTel + "  accessLogging: [{providers: [{name: a}, {name: b}]}]\n" + wlTel + "  accessLogging: [{match: {mode: SERVER}, disabled: true}]\n",
			labels:  reviewsLabels, client: "a,b", server: "", metrics: "prometheus"},
		{name: "disableSpanReporting (defaultProviders set: no default metrics)", cfg: providers + "defaultProviders: {tracing: [z]}",
			objects: nsTel + "  tracing: [{disableSpanReporting: true}]\n"},
		{name: "metrics disabled at the namespace", cfg: providers,
			objects: nsTel + "  metrics: [{providers: [{name: prometheus}], overrides: [{disabled: true}]}]\n"},
		{name: "metrics re-enabled by the workload after the root disabled them", cfg: providers,
			objects: rootTel + "  metrics: [{providers: [{name: prometheus}], overrides: [{disabled: true}]}]\n" +
				wlTel + "  metrics: [{overrides: [{match: {metric: REQUEST_COUNT}, disabled: false}]}]\n",
			labels: reviewsLabels, metrics: "prometheus"},
		{name: "an unknown provider is reported", cfg: providers, objects: nsTel + "  accessLogging: [{providers: [{name: nope}]}]\n",
			metrics: "prometheus", problem: `provider "nope" is not among the MeshConfig's extensionProviders`},
		{name: "a provider of a kind nave cannot log to is reported", cfg: providers, objects: nsTel + "  accessLogging: [{providers: [{name: sd}]}]\n",
			metrics: "prometheus", problem: `provider "sd" is a stackdriver provider`},
		{name: "two namespace-wide Telemetries: the first by name", cfg: providers,
			objects: nsTel + "  tracing: [{providers: [{name: z}]}]\n" + strings.Replace(nsTel, "name: ns", "name: second", 1) + "  tracing: [{providers: [{name: o}]}]\n",
			tracing: "z@1", metrics: "prometheus", problem: "already has the namespace-wide Telemetry"},
		{name: "another namespace's Telemetry does not apply", cfg: providers,
			objects: strings.Replace(nsTel, "namespace: shop", "namespace: web", 1) + "  tracing: [{providers: [{name: z}]}]\n", metrics: "prometheus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := telemetrySnap(t, tc.cfg, tc.objects)
			var problems []mesh.Problem
			tel := SelectTelemetry(snap, "shop", tc.labels, func(p mesh.Problem) { problems = append(problems, p) })
			if got := logNames(tel.AccessLogs[ClientSide]); got != tc.client {
				t.Errorf("client access logs = %q, want %q", got, tc.client)
			}
			if got := logNames(tel.AccessLogs[ServerSide]); got != tc.server {
				t.Errorf("server access logs = %q, want %q", got, tc.server)
			}
			tr := ""
			if x := tel.Tracing[ClientSide]; x != nil {
				tr = x.Provider.GetName() + "@" + strconv.FormatFloat(x.Sampling, 'g', -1, 64)
			}
			if tr != tc.tracing {
				t.Errorf("tracing = %q, want %q", tr, tc.tracing)
			}
			var ms []string
			for _, m := range tel.Metrics[ClientSide] {
				ms = append(ms, m.Provider.GetName())
			}
			if got := strings.Join(ms, ","); got != tc.metrics {
				t.Errorf("metrics = %q, want %q", got, tc.metrics)
			}
			found := tc.problem == ""
			for _, p := range problems {
				found = found || strings.Contains(p.Reason, tc.problem)
			}
			if !found {
				t.Errorf("problems %v lack %q", problems, tc.problem)
			}
		})
	}
}
