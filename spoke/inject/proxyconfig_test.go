package inject

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/navemesh/nave/shared/settings"
)

const bareProxyConfigPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
  annotations: ANNOTATIONS
spec:
  containers: [{name: app, image: shop/web:1}]
`

func proxyConfigPod(t *testing.T, annotation string) []byte {
	t.Helper()
	ann := "{}"
	if annotation != "" {
		ann = "{proxy.istio.io/config: '" + annotation + "'}"
	}
	return []byte(strings.Replace(bareProxyConfigPod, "ANNOTATIONS", ann, 1))
}

func agentContainer(t *testing.T, pod *corev1.Pod) corev1.Container {
	t.Helper()
	for _, c := range pod.Spec.InitContainers {
		if c.Name == ProxyContainer {
			return c
		}
	}
	t.Fatal("no agent container")
	return corev1.Container{}
}

func envValues(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

// TestProxyConfigPrecedence: the mesh's defaultConfig applies to every
// pod, and a pod's proxy.istio.io/config overrides it field by field
// (proxyMetadata entry by entry), as in Istio.
func TestProxyConfigPrecedence(t *testing.T) {
	meshCfg := &meshv1alpha1.MeshConfig{DefaultConfig: &meshv1alpha1.ProxyConfig{
		TerminationDrainDuration: durationpb.New(20 * time.Second),
		ProxyMetadata:            map[string]string{"ISTIO_META_DNS_CAPTURE": "true", "TEAM": "mesh"},
	}}
	in := newTestInjector(t, func(o *Options) { o.MeshConfig = func() *meshv1alpha1.MeshConfig { return meshCfg } })
	drainKey, metaKey := settings.EnvName("envoy.drainDuration"), settings.EnvName("proxyMetadata")

	for _, tc := range []struct {
		name, annotation string
		drain            string
		meta             string
		env              map[string]string
	}{
		{"mesh defaults", "", "20s", `{"ISTIO_META_DNS_CAPTURE":"true","TEAM":"mesh"}`,
			map[string]string{"ISTIO_META_DNS_CAPTURE": "true", "TEAM": "mesh"}},
		{"pod overrides", "{terminationDrainDuration: 3s, proxyMetadata: {TEAM: pod, EXTRA: x}}", "3s",
			`{"EXTRA":"x","ISTIO_META_DNS_CAPTURE":"true","TEAM":"pod"}`,
			map[string]string{"ISTIO_META_DNS_CAPTURE": "true", "TEAM": "pod", "EXTRA": "x"}},
		{"pod drains at once", "{terminationDrainDuration: 0s}", "0s", `{"ISTIO_META_DNS_CAPTURE":"true","TEAM":"mesh"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, pod, _ := review(t, in, podRequest(t, "shop", proxyConfigPod(t, tc.annotation)))
			if !resp.Allowed {
				t.Fatalf("refused: %v", resp.Result)
			}
			env := envValues(agentContainer(t, pod))
			if env[drainKey] != tc.drain || env[metaKey] != tc.meta {
				t.Errorf("drain %q, metadata %q; want %q, %q", env[drainKey], env[metaKey], tc.drain, tc.meta)
			}
			for k, v := range tc.env {
				if env[k] != v {
					t.Errorf("env %s = %q; want %q", k, env[k], v)
				}
			}
		})
	}

	// Without a mesh config (or before the hub gave one), a pod without
	// the annotation gets none of it: the agent's defaults.
	plain := newTestInjector(t, nil)
	_, pod, _ := review(t, plain, podRequest(t, "shop", proxyConfigPod(t, "")))
	if env := envValues(agentContainer(t, pod)); env[drainKey] != "" || env[metaKey] != "" {
		t.Errorf("without a mesh config: drain %q, metadata %q; want none", env[drainKey], env[metaKey])
	}
}

func TestProxyConfigAnnotationRefusals(t *testing.T) {
	in := newTestInjector(t, func(o *Options) {
		o.MeshConfig = func() *meshv1alpha1.MeshConfig {
			return &meshv1alpha1.MeshConfig{DefaultConfig: &meshv1alpha1.ProxyConfig{HoldApplicationUntilProxyStarts: wrapperspb.Bool(true)}}
		}
	})
	for _, tc := range []struct{ annotation, want string }{
		{"{terminationDrainDurationz: 3s}", `unknown field "terminationDrainDurationz"`},
		{"{terminationDrainDuration: soon}", "terminationDrainDuration"},
		{"{proxyMetadata: {NAVE_MESH: other}}", "NAVE_"},
		{"{proxyMetadata: {\"A=B\": x}}", "'='"},
		{"[1, 2]", "not a ProxyConfig"},
	} {
		resp, _, _ := review(t, in, podRequest(t, "shop", proxyConfigPod(t, tc.annotation)))
		if resp.Allowed || !strings.Contains(resp.Result.Message, AnnotationProxyConfig) || !strings.Contains(resp.Result.Message, tc.want) {
			t.Errorf("%s: allowed=%v %v; want refused naming the annotation and %q", tc.annotation, resp.Allowed, resp.Result, tc.want)
		}
	}
	// Known fields nave does not apply are warned about, never silently
	// taken; holdApplicationUntilProxyStarts false cannot let the app start
	// first (the native sidecar's startup probe holds it).
	resp, _, _ := review(t, in, podRequest(t, "shop", proxyConfigPod(t, "{concurrency: 2, holdApplicationUntilProxyStarts: false}")))
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	got := strings.Join(resp.Warnings, "\n")
	if !strings.Contains(got, "concurrency is ignored") || !strings.Contains(got, "holdApplicationUntilProxyStarts false has no effect") {
		t.Errorf("warnings %q", resp.Warnings)
	}
}

// TestDNSCaptureInjection: proxyMetadata ISTIO_META_DNS_CAPTURE (from the
// mesh's defaultConfig or the pod's annotation) makes the sidecar's
// capture redirect DNS to the agent; false, or a template without
// capture, does not.
func TestDNSCaptureInjection(t *testing.T) {
	on := true
	meshCfg := func() *meshv1alpha1.MeshConfig {
		if !on {
			return nil
		}
		return &meshv1alpha1.MeshConfig{DefaultConfig: &meshv1alpha1.ProxyConfig{ProxyMetadata: map[string]string{"ISTIO_META_DNS_CAPTURE": "true"}}}
	}
	in := newTestInjector(t, func(o *Options) { o.MeshConfig = meshCfg })
	captureArgs := func(pod *corev1.Pod) (string, bool) {
		for _, c := range pod.Spec.InitContainers {
			if c.Name == CaptureContainer {
				return strings.Join(c.Args, " "), true
			}
		}
		return "", false
	}
	for _, tc := range []struct {
		name, annotation string
		meshOn           bool
		want             bool
	}{
		{"from the mesh's defaultConfig", "", true, true},
		{"from the pod's annotation", "{proxyMetadata: {ISTIO_META_DNS_CAPTURE: \"true\"}}", false, true},
		{"the pod turns it off", "{proxyMetadata: {ISTIO_META_DNS_CAPTURE: \"false\"}}", true, false},
		{"off", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on = tc.meshOn
			_, pod, _ := review(t, in, podRequest(t, "shop", proxyConfigPod(t, tc.annotation)))
			args, ok := captureArgs(pod)
			if !ok || strings.Contains(args, "--redirect-dns") != tc.want {
				t.Errorf("capture args %q; want --redirect-dns %v", args, tc.want)
			}
		})
	}
	on = true
	grpcPod := strings.Replace(string(proxyConfigPod(t, "")), "annotations: {}", "annotations: {inject.istio.io/templates: grpc-agent}", 1)
	_, pod, _ := review(t, in, podRequest(t, "shop", []byte(grpcPod)))
	if args, ok := captureArgs(pod); ok {
		t.Errorf("grpc-agent pod has a capture container (%s); want none", args)
	}
}
