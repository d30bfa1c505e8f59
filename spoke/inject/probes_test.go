package inject

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/navemesh/nave/spoke/appprobe"
)

// agentEnvValue is the value of the agent container's env var name, and
// whether it is set.
func agentEnvValue(t *testing.T, pod *corev1.Pod, name string) (string, bool) {
	t.Helper()
	agent := container(pod.Spec.InitContainers, ProxyContainer)
	if agent == nil {
		t.Fatalf("no %s container", ProxyContainer)
	}
	e, ok := envOf(agent)[name]
	return e.Value, ok
}

func appContainer(t *testing.T, pod *corev1.Pod, name string) *corev1.Container {
	t.Helper()
	c := container(pod.Spec.Containers, name)
	if c == nil {
		t.Fatalf("no container %s", name)
	}
	return c
}

// TestProbesRewritten: every httpGet, grpc and tcpSocket probe of the app
// containers points at the agent with its timing kept, the agent gets the
// originals with named ports resolved, and the probes it cannot take over
// stay as written with a warning each.
func TestProbesRewritten(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "pods", "sidecar-probes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	resp, pod, _ := review(t, newTestInjector(t, nil), podRequest(t, "shop", src))
	if pod == nil {
		t.Fatalf("refused: %v", resp.Result)
	}
	text, ok := agentEnvValue(t, pod, "NAVE_APP_PROBES")
	if !ok {
		t.Fatal("the agent is given no NAVE_APP_PROBES")
	}
	probers, err := appprobe.Parse(text)
	if err != nil {
		t.Fatalf("the agent would refuse NAVE_APP_PROBES: %v\n%s", err, text)
	}
	live, ready, start, cart := probers["/app-health/web/livez"], probers["/app-health/web/readyz"], probers["/app-health/web/startupz"], probers["/app-health/cart/livez"]
	switch {
	case len(probers) != 4:
		t.Errorf("the agent runs %d probes; want 4 (web's three, cart's liveness): %s", len(probers), text)
	case live.HTTPGet == nil || live.HTTPGet.Port != 8080 || live.HTTPGet.Path != "/healthz" || live.TimeoutSeconds != 2:
		t.Errorf("web livez %+v; want GET /healthz on 8080 (port http resolved), 2 s", live)
	case ready.HTTPGet == nil || ready.HTTPGet.Port != 8443 || ready.HTTPGet.Scheme != "HTTPS" || len(ready.HTTPGet.HTTPHeaders) != 1 || ready.HTTPGet.HTTPHeaders[0].Value != "kubelet":
		t.Errorf("web readyz %+v; want HTTPS on 8443 with X-Probe", ready.HTTPGet)
	case start.TCPSocket == nil || start.TCPSocket.Port != 8443:
		t.Errorf("web startupz %+v; want TCP to 8443 (port admin resolved)", start)
	case cart.GRPC == nil || cart.GRPC.Port != 9090 || cart.GRPC.Service == nil || *cart.GRPC.Service != "shop.Cart" || cart.TimeoutSeconds != 3:
		t.Errorf("cart livez %+v; want gRPC health of shop.Cart on 9090, 3 s", cart)
	}
	web := appContainer(t, pod, "web")
	for _, c := range []struct {
		probe *corev1.Probe
		path  string
	}{{web.LivenessProbe, "/app-health/web/livez"}, {web.ReadinessProbe, "/app-health/web/readyz"}, {web.StartupProbe, "/app-health/web/startupz"}, {appContainer(t, pod, "cart").LivenessProbe, "/app-health/cart/livez"}} {
		h := c.probe.HTTPGet
		if h == nil || h.Path != c.path || h.Port.IntValue() != statusPort || h.Scheme != corev1.URISchemeHTTP || h.Host != "" || c.probe.TCPSocket != nil || c.probe.GRPC != nil {
			t.Errorf("probe %+v; want only httpGet %s on %d", c.probe, c.path, statusPort)
		}
	}
	if p := web.LivenessProbe; p.InitialDelaySeconds != 5 || p.PeriodSeconds != 7 || p.TimeoutSeconds != 2 || p.FailureThreshold != 4 {
		t.Errorf("web liveness timing %+v; want the original's kept", p)
	}
	if p := web.ReadinessProbe; p.PeriodSeconds != 3 || p.SuccessThreshold != 2 {
		t.Errorf("web readiness timing %+v; want the original's kept", p)
	}
	if p := appContainer(t, pod, "cart").ReadinessProbe; p.Exec == nil || p.HTTPGet != nil {
		t.Errorf("cart's exec probe became %+v", p)
	}
	odd := appContainer(t, pod, "odd")
	if odd.LivenessProbe.HTTPGet.Host != "example.com" || odd.LivenessProbe.HTTPGet.Port.IntValue() != 80 || odd.ReadinessProbe.TCPSocket == nil {
		t.Errorf("odd's probes changed: %+v %+v", odd.LivenessProbe, odd.ReadinessProbe)
	}
	warned := strings.Join(resp.Warnings, "\n")
	for _, w := range []string{`container odd: livenessProbe is not rewritten to the agent: httpGet.host "example.com" is not the pod`,
		`container odd: readinessProbe is not rewritten to the agent: port "metrics" names no port of the container`} {
		if !strings.Contains(warned, w) {
			t.Errorf("warnings %q lack %q", resp.Warnings, w)
		}
	}
}

func TestProbeRewriteAnnotation(t *testing.T) {
	pod := func(ann string) []byte {
		return []byte("metadata: {name: p, annotations: {" + ann + "}}\n" +
			"spec:\n  initContainers: [{name: side, image: s, restartPolicy: Always, readinessProbe: {httpGet: {port: 9000}}}]\n" +
			"  containers: [{name: app, image: a, livenessProbe: {httpGet: {path: /l, port: 8080}}, readinessProbe: {httpGet: {path: /healthz/ready, port: 15021}}}]\n")
	}
	in := newTestInjector(t, nil)
	for _, c := range []struct {
		ann     string
		rewrite bool
	}{{"", true}, {`sidecar.istio.io/rewriteAppHTTPProbers: "true"`, true}, {`sidecar.istio.io/rewriteAppHTTPProbers: "false"`, false},
		{`sidecar.istio.io/rewriteAppHTTPProbers: "False"`, false}, {`sidecar.istio.io/rewriteAppHTTPProbers: "0"`, false}} {
		resp, p, _ := review(t, in, podRequest(t, "shop", pod(c.ann)))
		if p == nil {
			t.Fatalf("%s: refused", c.ann)
		}
		app := appContainer(t, p, "app")
		_, hasEnv := agentEnvValue(t, p, "NAVE_APP_PROBES")
		if got := app.LivenessProbe.HTTPGet.Path == "/app-health/app/livez"; got != c.rewrite || hasEnv != c.rewrite {
			t.Errorf("%q: liveness %+v, env set %v; want rewritten %v", c.ann, app.LivenessProbe.HTTPGet, hasEnv, c.rewrite)
		}
		if !c.rewrite && app.LivenessProbe.HTTPGet.Port.IntValue() != 8080 {
			t.Errorf("%q: liveness %+v; want it as written", c.ann, app.LivenessProbe.HTTPGet)
		}
		// a probe already on the agent's port, and the pod's own init
		// containers, are left alone, silently
		if h := app.ReadinessProbe.HTTPGet; h.Path != "/healthz/ready" || h.Port.IntValue() != 15021 {
			t.Errorf("%q: readiness on the status port became %+v", c.ann, h)
		}
		for _, ic := range p.Spec.InitContainers {
			if ic.Name == "side" && ic.ReadinessProbe.HTTPGet.Port.IntValue() != 9000 {
				t.Errorf("%q: the pod's init container's probe became %+v", c.ann, ic.ReadinessProbe.HTTPGet)
			}
		}
		if len(resp.Warnings) != 0 {
			t.Errorf("%q: warnings %q", c.ann, resp.Warnings)
		}
	}
	// inject.rewriteAppProbes false: kept unless the pod asks
	keep := newTestInjector(t, func(o *Options) { o.KeepAppProbes = true })
	if keep.Status().RewriteAppProbes || !in.Status().RewriteAppProbes {
		t.Error("/debug/inject does not say whether probes are rewritten")
	}
	for ann, rewrite := range map[string]bool{"": false, `sidecar.istio.io/rewriteAppHTTPProbers: "true"`: true} {
		_, p, _ := review(t, keep, podRequest(t, "shop", pod(ann)))
		if p == nil {
			t.Fatalf("%q: refused", ann)
		}
		if got := appContainer(t, p, "app").LivenessProbe.HTTPGet.Path == "/app-health/app/livez"; got != rewrite {
			t.Errorf("rewriting off for the spoke, annotation %q: rewritten %v; want %v", ann, got, rewrite)
		}
	}
	resp, p, _ := review(t, in, podRequest(t, "shop", pod(`sidecar.istio.io/rewriteAppHTTPProbers: "sometimes"`)))
	if p != nil || resp.Result == nil || !strings.Contains(resp.Result.Message, `metadata.annotations[sidecar.istio.io/rewriteAppHTTPProbers]: "sometimes" is not true or false`) {
		t.Errorf("a bad value: %+v; want the pod refused naming the annotation", resp.Result)
	}
}
