package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/testwait"
)

const injectProxyImage = "ghcr.io/navemesh/nave-proxy:e2e"

// injectingSpoke is an enrolled nave-spoke watching a cluster and serving
// the injector (and the validation webhook) on loopback.
type injectingSpoke struct {
	admin, server int
	ra            string
	proc          *harness.Proc
}

func startInjectingSpoke(t *testing.T, h *hub, kc *kubetest.Cluster, cluster string) *injectingSpoke {
	t.Helper()
	work := t.TempDir()
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(h.token(t, "default", cluster, "1h")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &injectingSpoke{admin: harness.FreePort(t), server: harness.FreePort(t), ra: addr(harness.FreePort(t))}
	s.proc = harness.Start(t, "spoke-"+cluster, binary("nave-spoke"),
		"--source", "kubernetes", "--kubernetes.kubeconfig", kc.Kubeconfig(t, spokeIdentity, "system:serviceaccounts", "system:serviceaccounts:nave-system"),
		"--cluster", cluster, "--hub.address", addr(h.spokes), "--admin.listen", addr(s.admin),
		"--hub.token-file", tokenFile, "--hub.ca-hash", h.pin(t), "--hub.state-dir", filepath.Join(work, "state"), "--ra.listen", s.ra,
		"--hub.backoff-initial", "100ms", "--hub.backoff-max", "1s", "--log.level", "debug",
		"--webhook.listen", addr(s.server), "--webhook.hosts", "127.0.0.1",
		"--inject.enabled", "--inject.proxy-image", injectProxyImage, "--inject.xds-address", addr(h.xds), "--inject.ra-address", s.ra)
	harness.WaitReady(t, "http://"+addr(s.admin)+"/healthz/ready", 60*time.Second)
	return s
}

// podYAML is a pod of one container; extra is more of its metadata.
func podYAML(name, namespace, extraMeta, extraSpec string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n%s\nspec:\n  containers: [{name: app, image: shop/app:1}]\n%s\n",
		name, namespace, extraMeta, extraSpec)
}

func createPod(t *testing.T, cs kubernetes.Interface, doc string, dryRun bool) (*corev1.Pod, error) {
	t.Helper()
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(doc), &pod); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cs.CoreV1().Pods(pod.Namespace).Create(ctx, &pod, opts)
}

func initNames(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.InitContainers {
		out = append(out, c.Name)
	}
	return out
}

// injectedAgentEnv is the literal environment of pod p's agent container.
func injectedAgentEnv(t *testing.T, p *corev1.Pod) map[string]string {
	t.Helper()
	for _, c := range p.Spec.InitContainers {
		if c.Name == "nave-proxy" {
			m := map[string]string{}
			for _, e := range c.Env {
				m[e.Name] = e.Value
			}
			return m
		}
	}
	t.Fatalf("pod %s/%s has no nave-proxy container", p.Namespace, p.Name)
	return nil
}

// TestSidecarInjection is issue 13's injection proof: the real
// kube-apiserver, with the MutatingWebhookConfiguration of
// deploy/spoke/injection.yaml (its clientConfig pointed at loopback), calls
// the real nave-spoke, enrolled with a real hub: pods of labelled
// namespaces come back injected per template with the spoke's trust
// material, a gateway pod with its istio-proxy container made the router
// agent; unlabelled, opted-out, hostNetwork and system-namespace pods
// come back untouched; an unknown template is refused naming the
// annotation; the listener survives bad requests.
func TestSidecarInjection(t *testing.T) {
	kc := kubeCluster(t)
	kc.Apply(t, []byte(`apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {istio-injection: enabled}}
---
apiVersion: v1
kind: Namespace
metadata: {name: demo, labels: {istio.io/rev: default}}
---
apiVersion: v1
kind: Namespace
metadata: {name: canary, labels: {istio.io/rev: canary}}
---
apiVersion: v1
kind: Namespace
metadata: {name: plain}
`))
	cs := kubernetes.NewForConfigOrDie(kc.Admin)
	// kube-system asks for injection too: neither the selectors nor the
	// spoke may inject it.
	ns, err := cs.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["istio-injection"] = "enabled"
	if _, err := cs.CoreV1().Namespaces().Update(t.Context(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := newSecureHub(t)
	s := startInjectingSpoke(t, h, kc, "c1")
	kc.Apply(t, shippedWebhooks(t, "injection.yaml", s.server))
	meshRoot, err := os.ReadFile(filepath.Join(h.state, "ca", "default", "root-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	hubCA, err := os.ReadFile(servingcert.RootPath(h.state))
	if err != nil {
		t.Fatal(err)
	}

	// The spoke fills in the caBundle; the API server calls it once it has.
	testwait.For(t, 30*time.Second, func() error {
		p, err := createPod(t, cs, podYAML("probe", "shop", "", ""), true)
		if err != nil {
			return err
		}
		if len(p.Spec.InitContainers) == 0 {
			return fmt.Errorf("the probe pod came back uninjected")
		}
		return nil
	})

	t.Run("labelled namespaces: injected per template", func(t *testing.T) {
		p, err := createPod(t, cs, podYAML("web", "shop", "  labels: {app: web}", ""), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := initNames(p); !slices.Equal(got, []string{"nave-init", "nave-proxy"}) {
			t.Fatalf("sidecar template: init containers %v, want [nave-init nave-proxy]", got)
		}
		proxy := p.Spec.InitContainers[1]
		if proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways || proxy.Image != injectProxyImage {
			t.Errorf("nave-proxy: restartPolicy %v image %s, want a native sidecar of %s", proxy.RestartPolicy, proxy.Image, injectProxyImage)
		}
		if init := p.Spec.InitContainers[0]; init.Args[0] != "capture" || !slices.Contains(init.Args, "--exclude-inbound-ports=15000,15020,15021") {
			t.Errorf("nave-init args %v: want capture with the status ports excluded", init.Args)
		}
		env := injectedAgentEnv(t, p)
		for k, want := range map[string]string{
			"NAVE_MODE": "envoy", "NAVE_CLUSTER": "c1", "NAVE_MESH": "default", "NAVE_TRUST_DOMAIN": "cluster.local",
			"NAVE_XDS_ADDRESS": addr(h.xds), "NAVE_RA_ADDRESS": s.ra, "NAVE_RA_IDENTITY": "spiffe://cluster.local/nave/cluster/c1",
			"NAVE_TRUST_MESH_ROOTS": string(meshRoot), "NAVE_TRUST_HUB_CA": string(hubCA),
		} {
			if env[k] != want {
				t.Errorf("%s = %.60q, want %.60q", k, env[k], want)
			}
		}
		if p.Labels["security.istio.io/tlsMode"] != "istio" || p.Labels["service.istio.io/canonical-name"] != "web" || p.Annotations["sidecar.istio.io/status"] == "" {
			t.Errorf("labels %v annotations %v: want the mesh's labels and the status annotation", p.Labels, p.Annotations)
		}
		vols := map[string]bool{}
		for _, v := range p.Spec.Volumes {
			vols[v.Name] = true
		}
		if !vols["nave-run"] || !vols["nave-podinfo"] || !vols["nave-token"] {
			t.Errorf("volumes %v: want nave-run, nave-podinfo and nave-token", vols)
		}

		g, err := createPod(t, cs, podYAML("client", "shop", "  annotations: {inject.istio.io/templates: grpc-agent}", ""), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := initNames(g); !slices.Equal(got, []string{"nave-proxy"}) {
			t.Fatalf("grpc-agent template: init containers %v, want [nave-proxy]", got)
		}
		if injectedAgentEnv(t, g)["NAVE_MODE"] != "grpc" {
			t.Error("grpc-agent: the agent is not in grpc mode")
		}
		app := g.Spec.Containers[0]
		appEnv := map[string]string{}
		for _, e := range app.Env {
			appEnv[e.Name] = e.Value
		}
		// The bootstrap, and grpc-go's CSM observability labels (docs/telemetry.md).
		wantEnv := map[string]string{"GRPC_XDS_BOOTSTRAP": "/var/run/nave/grpc-bootstrap.json",
			"CSM_CANONICAL_SERVICE_NAME": "client", "CSM_MESH_ID": "default", "CSM_WORKLOAD_NAME": "client"}
		if !maps.Equal(appEnv, wantEnv) || len(app.VolumeMounts) != 1 || app.VolumeMounts[0].MountPath != "/var/run/nave" {
			t.Errorf("grpc-agent app container env %v mounts %v: want %v and nave-run", app.Env, app.VolumeMounts, wantEnv)
		}

		for _, doc := range []string{
			podYAML("rev", "demo", "", ""), // namespace istio.io/rev=default
			podYAML("asked", "plain", "  labels: {sidecar.istio.io/inject: \"true\"}", ""), // the pod asks
			podYAML("asked-rev", "plain", "  labels: {istio.io/rev: default}", ""),         // the pod names the revision
		} {
			p, err := createPod(t, cs, doc, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := initNames(p); !slices.Equal(got, []string{"nave-init", "nave-proxy"}) {
				t.Errorf("pod %s/%s: init containers %v, want injected", p.Namespace, p.Name, got)
			}
		}
	})

	t.Run("a gateway pod: its istio-proxy container becomes the router agent", func(t *testing.T) {
		// As examples/ingress-gateway's pods: an unlabelled namespace, the
		// pod asking by its label.
		doc := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ingress\n  namespace: plain\n" +
			"  labels: {istio: ingressgateway, sidecar.istio.io/inject: \"true\"}\n  annotations: {inject.istio.io/templates: gateway}\n" +
			"spec:\n  containers: [{name: istio-proxy, image: auto, ports: [{containerPort: 8080}]}]\n"
		p, err := createPod(t, cs, doc, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.InitContainers) != 0 || len(p.Spec.Containers) != 1 {
			t.Fatalf("init containers %v, containers %d: want the gateway container alone", initNames(p), len(p.Spec.Containers))
		}
		gw := p.Spec.Containers[0]
		if gw.Name != "istio-proxy" || gw.Image != injectProxyImage || !slices.Equal(gw.Command, []string{"nave-agent"}) {
			t.Errorf("container %s image %s command %v: want istio-proxy running nave-agent of %s", gw.Name, gw.Image, gw.Command, injectProxyImage)
		}
		env := map[string]string{}
		for _, e := range gw.Env {
			env[e.Name] = e.Value
		}
		if env["NAVE_MODE"] != "envoy" || env["NAVE_PROXY_TYPE"] != "router" || env["NAVE_XDS_ADDRESS"] != addr(h.xds) {
			t.Errorf("NAVE_MODE %q NAVE_PROXY_TYPE %q NAVE_XDS_ADDRESS %q: want an envoy router agent dialling the hub", env["NAVE_MODE"], env["NAVE_PROXY_TYPE"], env["NAVE_XDS_ADDRESS"])
		}
		if r := gw.ReadinessProbe; r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/healthz/ready" || r.HTTPGet.Port.IntValue() != 15021 {
			t.Errorf("readiness probe %+v: want the agent's", r)
		}
		if _, ok := p.Labels["security.istio.io/tlsMode"]; ok || p.Annotations["sidecar.istio.io/status"] == "" {
			t.Errorf("labels %v annotations %v: want no tlsMode and the status annotation", p.Labels, p.Annotations)
		}
	})

	t.Run("app probes are rewritten to the agent, the API server storing the pod", func(t *testing.T) {
		doc := func(name, ann string) string {
			return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  namespace: shop\n  annotations: {" + ann + "}\nspec:\n  containers:\n" +
				"  - name: web\n    image: shop/web:1\n    ports: [{name: http, containerPort: 8080}]\n" +
				"    livenessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 7}\n    readinessProbe: {grpc: {port: 9090}}\n"
		}
		p, err := createPod(t, cs, doc("probed", ""), false)
		if err != nil {
			t.Fatal(err)
		}
		web := p.Spec.Containers[0]
		if h := web.LivenessProbe.HTTPGet; h == nil || h.Path != "/app-health/web/livez" || h.Port.IntValue() != 15021 || web.LivenessProbe.PeriodSeconds != 7 {
			t.Errorf("stored liveness probe %+v; want httpGet /app-health/web/livez on 15021, period kept", web.LivenessProbe)
		}
		if h := web.ReadinessProbe.HTTPGet; h == nil || h.Path != "/app-health/web/readyz" || web.ReadinessProbe.GRPC != nil {
			t.Errorf("stored readiness probe %+v; want httpGet /app-health/web/readyz", web.ReadinessProbe)
		}
		// as the API server defaulted them: timeoutSeconds 1, the gRPC service ""
		want := `{"/app-health/web/livez":{"httpGet":{"path":"/healthz","port":8080,"scheme":"HTTP"},"timeoutSeconds":1},"/app-health/web/readyz":{"grpc":{"port":9090,"service":""},"timeoutSeconds":1}}`
		if got := injectedAgentEnv(t, p)["NAVE_APP_PROBES"]; got != want {
			t.Errorf("NAVE_APP_PROBES = %s; want %s", got, want)
		}
		off, err := createPod(t, cs, doc("probed-off", `sidecar.istio.io/rewriteAppHTTPProbers: "false"`), false)
		if err != nil {
			t.Fatal(err)
		}
		if h := off.Spec.Containers[0].LivenessProbe.HTTPGet; h == nil || h.Path != "/healthz" || h.Port.String() != "http" || len(initNames(off)) == 0 {
			t.Errorf("with the annotation false: liveness %+v; want it as written, the pod injected", h)
		}
		if _, set := injectedAgentEnv(t, off)["NAVE_APP_PROBES"]; set {
			t.Error("with the annotation false the agent still gets NAVE_APP_PROBES")
		}
	})

	t.Run("untouched", func(t *testing.T) {
		for _, doc := range []string{
			podYAML("unlabelled", "plain", "", ""),
			podYAML("other-rev", "canary", "", ""),
			podYAML("opted-out", "shop", "  labels: {sidecar.istio.io/inject: \"false\"}", ""),
			podYAML("opted-out-legacy", "shop", "  annotations: {sidecar.istio.io/inject: \"false\"}", ""),
			podYAML("host", "shop", "", "  hostNetwork: true"),
			podYAML("sys", "kube-system", "", ""),
			podYAML("own", "nave-system", "  labels: {sidecar.istio.io/inject: \"true\"}", ""),
			podYAML("pod-other-rev", "shop", "  labels: {istio.io/rev: canary}", ""),
		} {
			p, err := createPod(t, cs, doc, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Spec.InitContainers) != 0 || len(p.Spec.Volumes) != 0 || p.Annotations["sidecar.istio.io/status"] != "" {
				t.Errorf("pod %s/%s was changed: init containers %v", p.Namespace, p.Name, initNames(p))
			}
		}
	})

	t.Run("an unknown template is refused, naming the annotation", func(t *testing.T) {
		_, err := createPod(t, cs, podYAML("wp", "shop", "  annotations: {inject.istio.io/templates: waypoint}", ""), false)
		want := `admission webhook "namespace.inject.nave.io" denied the request: the sidecar injector refuses the pod: metadata.annotations[inject.istio.io/templates]: unknown template "waypoint"`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want %s", err, want)
		}
	})

	t.Run("bad requests on /inject, then it still injects", func(t *testing.T) {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		defer client.CloseIdleConnections()
		url := "https://" + addr(s.server) + "/inject"
		for _, tc := range []struct {
			ctype, body string
			code        int
		}{
			{"text/plain", `{}`, http.StatusUnsupportedMediaType},
			{"application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",`, http.StatusBadRequest},
			{"application/json", `[1,2,3]`, http.StatusBadRequest},
			{"application/json", strings.Repeat(" ", 9<<20), http.StatusRequestEntityTooLarge},
		} {
			resp, err := client.Post(url, tc.ctype, bytes.NewReader([]byte(tc.body)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Errorf("%s %.40q: status %d, want %d", tc.ctype, tc.body, resp.StatusCode, tc.code)
			}
		}
		p, err := createPod(t, cs, podYAML("after", "shop", "", ""), false)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.InitContainers) != 2 {
			t.Errorf("after bad requests: init containers %v, want injected", initNames(p))
		}
	})

	metrics := "http://" + addr(s.admin) + "/metrics"
	for name, atLeast := range map[string]float64{
		`nave_spoke_inject_pods_total{result="injected"}`:                       6,
		`nave_spoke_inject_pods_total{result="opted_out"}`:                      1, // the legacy annotation: the selector cannot see it
		`nave_spoke_inject_pods_total{result="host_network"}`:                   1,
		`nave_spoke_inject_pods_total{result="other_revision"}`:                 1,
		`nave_spoke_inject_pods_total{result="refused"}`:                        1,
		`nave_spoke_webhook_reviews_total{result="denied",webhook="injection"}`: 1,
	} {
		n, err := metric(metrics, name)
		if err != nil {
			t.Fatal(err)
		}
		if n < atLeast {
			t.Errorf("%s = %v, want at least %v", name, n, atLeast)
		}
	}
	assertMetricsDocumented(t, metrics)
	var st struct {
		Revision, XDSAddress, TrustDomain, NotReady string
	}
	if err := harness.GetJSON("http://"+addr(s.admin)+"/debug/inject", &st); err != nil || st.Revision != "default" ||
		st.XDSAddress != addr(h.xds) || st.TrustDomain != "cluster.local" || st.NotReady != "" {
		t.Errorf("/debug/inject: %+v %v", st, err)
	}
}
