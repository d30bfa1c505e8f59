package inject

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/spoke/capture"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/ from the injector's current output")

// golden is what testdata/golden/NAME.yaml holds: the warnings and the
// pod the API server stores after applying the patch.
type golden struct {
	Warnings []string       `json:"warnings,omitempty"`
	Pod      map[string]any `json:"pod"`
}

// TestGolden injects every pod of testdata/pods and compares the patched
// pod with testdata/golden (go test -run TestGolden -update rewrites
// them); the injected pod reviewed again comes back untouched.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/pods/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no pods in testdata/pods: %v", err)
	}
	in := newTestInjector(t, nil)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var meta struct {
				Metadata struct{ Namespace string } `json:"metadata"`
			}
			if err := yaml.Unmarshal(src, &meta); err != nil {
				t.Fatal(err)
			}
			req := podRequest(t, meta.Metadata.Namespace, src)
			resp, _, out := review(t, in, req)
			if !resp.Allowed || resp.Patch == nil {
				t.Fatalf("not injected: allowed=%v result=%v", resp.Allowed, resp.Result)
			}
			var g golden
			g.Warnings = resp.Warnings
			if err := yaml.Unmarshal(out, &g.Pod); err != nil {
				t.Fatal(err)
			}
			got, err := yaml.Marshal(g)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", name+".yaml")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from the injector's output (rerun with -update if the change is meant):\n%s", path, lineDiff(string(want), string(got)))
			}

			again := podRequest(t, meta.Metadata.Namespace, out)
			resp2 := in.Review(context.Background(), again)
			if !resp2.Allowed || resp2.Patch != nil {
				t.Errorf("re-injecting an injected pod: allowed=%v patch=%s, want allowed with no patch", resp2.Allowed, resp2.Patch)
			}
		})
	}
}

// lineDiff shows the first lines that differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for i := 0; i < max(len(w), len(g)) && len(out) < 20; i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			out = append(out, "- "+a, "+ "+b)
		}
	}
	return strings.Join(out, "\n")
}

func container(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func envOf(c *corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

const minimalPod = "metadata: {name: web}\nspec: {containers: [{name: app, image: a}]}\n"

// TestSidecarTemplateContract checks, field by field, what nave-agent and
// the kubelet rely on in the sidecar template (docs/injection.md and the
// agent contract).
func TestSidecarTemplateContract(t *testing.T) {
	in := newTestInjector(t, nil)
	_, pod, _ := review(t, in, podRequest(t, "shop", []byte(minimalPod)))
	if pod == nil {
		t.Fatal("refused")
	}
	if got := []string{pod.Spec.InitContainers[0].Name, pod.Spec.InitContainers[1].Name}; !slices.Equal(got, []string{CaptureContainer, ProxyContainer}) {
		t.Fatalf("init containers %v, want the capture then the proxy, first", got)
	}
	capt, proxy := &pod.Spec.InitContainers[0], &pod.Spec.InitContainers[1]
	if capt.RestartPolicy != nil {
		t.Errorf("the capture container has restartPolicy %v: it must run to completion", *capt.RestartPolicy)
	}
	if proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the proxy is not a native sidecar (restartPolicy Always)")
	}
	if sc := proxy.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1337 {
		t.Error("the proxy does not run as uid 1337")
	}
	if sc := capt.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || !slices.Contains(sc.Capabilities.Add, "NET_ADMIN") || !slices.Contains(sc.Capabilities.Add, "NET_RAW") {
		t.Error("the capture container is not root with NET_ADMIN and NET_RAW")
	}
	if proxy.StartupProbe == nil || proxy.StartupProbe.HTTPGet.Path != "/healthz/ready" || proxy.StartupProbe.HTTPGet.Port.IntValue() != 15021 {
		t.Errorf("startup probe %+v, want /healthz/ready on 15021", proxy.StartupProbe)
	}
	if capt.Command[0] != "nave-agent" || capt.Args[0] != "capture" || proxy.Command[0] != "nave-agent" {
		t.Errorf("commands %v %v and %v %v, want nave-agent capture and nave-agent", capt.Command, capt.Args, proxy.Command, proxy.Args)
	}
	env := envOf(proxy)
	for k, v := range map[string]string{
		"NAVE_MODE": "envoy", "NAVE_MESH": "default", "NAVE_CLUSTER": "c1", "NAVE_TRUST_DOMAIN": "cluster.local",
		"NAVE_DOMAIN_SUFFIX": "cluster.local", "NAVE_RA_ADDRESS": "nave-spoke.nave-system.svc:15023", "NAVE_RA_IDENTITY": "spiffe://cluster.local/nave/cluster/c1",
		"NAVE_RA_TOKEN_FILE": "/var/run/secrets/tokens/istio-token", "NAVE_TRUST_MESH_ROOTS": string(testTrust.MeshRoots),
		"NAVE_TRUST_HUB_CA": string(testTrust.HubCA), "NAVE_XDS_ADDRESS": "hub.example.com:15010", "NAVE_DIR": "/var/run/nave",
		"NAVE_POD_LABELS_FILE": "/etc/nave/pod/labels", "NAVE_POD_ANNOTATIONS_FILE": "/etc/nave/pod/annotations",
		"NAVE_STATUS_LISTEN": ":15021", "NAVE_PROXY_UID": "1337",
	} {
		if env[k].Value != v {
			t.Errorf("%s = %q, want %q", k, env[k].Value, v)
		}
	}
	for k, path := range map[string]string{"NAVE_POD_NAME": "metadata.name", "NAVE_POD_NAMESPACE": "metadata.namespace",
		"NAVE_POD_SERVICE_ACCOUNT": "spec.serviceAccountName", "NAVE_POD_IP": "status.podIP", "NAVE_POD_NODE": "spec.nodeName"} {
		if e := env[k]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("%s is not the downward API's %s: %+v", k, path, e)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols[VolumeRun]; v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Error("nave-run is not an in-memory emptyDir")
	}
	if v := vols[VolumeToken]; v.Projected == nil || v.Projected.Sources[0].ServiceAccountToken.Audience != "istio-ca" || v.Projected.Sources[0].ServiceAccountToken.Path != "istio-token" {
		t.Error("nave-token is not a projected token for audience istio-ca at istio-token")
	}
	if v := vols[VolumePodInfo]; v.DownwardAPI == nil || len(v.DownwardAPI.Items) != 2 {
		t.Error("nave-podinfo is not the downward API's labels and annotations")
	}
	if app := container(pod.Spec.Containers, "app"); len(app.Env) != 0 || len(app.VolumeMounts) != 0 {
		t.Error("the sidecar template changed the app container")
	}
	if _, set := env["NAVE_XDS_FALLBACK_ADDRESS"]; set {
		t.Error("NAVE_XDS_FALLBACK_ADDRESS set without inject.xdsFallbackAddress")
	}
	if pod.Labels[LabelTLSMode] != "istio" || pod.Labels[LabelCanonicalName] != "web" || pod.Annotations[AnnotationStatus] == "" {
		t.Errorf("labels %v annotations %v: want tlsMode istio, canonical-name web and the status annotation", pod.Labels, pod.Annotations)
	}

	// The capture container's flags, given to the capture command, are
	// Istio's default capture with the status ports excluded.
	want := capture.Default()
	want.ExcludeInboundPorts = []int{15000, 15020, 15021}
	if got := capture.Rules(parseCaptureArgs(t, capt.Args[1:]), capture.IPv4); got != capture.Rules(want, capture.IPv4) {
		t.Errorf("the capture flags give other rules than the default capture:\n%s", got)
	}
}

// parseCaptureArgs runs the capture command's flag parsing on args in
// dry-run mode and returns the Config it prints rules for.
func parseCaptureArgs(t *testing.T, args []string) capture.Config {
	t.Helper()
	c, err := capture.ParseArgs(args)
	if err != nil {
		t.Fatalf("capture flags %v: %v", args, err)
	}
	return c
}

func TestGRPCAgentTemplate(t *testing.T) {
	in := newTestInjector(t, nil)
	src := "metadata: {name: c, annotations: {inject.istio.io/templates: grpc-agent}}\nspec: {containers: [{name: a, image: a}, {name: b, image: b}]}\n"
	_, pod, _ := review(t, in, podRequest(t, "demo", []byte(src)))
	if pod == nil {
		t.Fatal("refused")
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != ProxyContainer {
		t.Fatalf("init containers %v: want the agent alone (no capture)", pod.Spec.InitContainers)
	}
	if envOf(&pod.Spec.InitContainers[0])["NAVE_MODE"].Value != "grpc" {
		t.Error("the agent is not in grpc mode")
	}
	if _, ok := envOf(&pod.Spec.InitContainers[0])["NAVE_PROXY_UID"]; ok {
		t.Error("grpc mode has a proxy uid")
	}
	for _, c := range pod.Spec.Containers {
		if envOf(&c)["GRPC_XDS_BOOTSTRAP"].Value != "/var/run/nave/grpc-bootstrap.json" {
			t.Errorf("container %s has no GRPC_XDS_BOOTSTRAP", c.Name)
		}
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != VolumeRun || c.VolumeMounts[0].MountPath != "/var/run/nave" || !c.VolumeMounts[0].ReadOnly {
			t.Errorf("container %s mounts %v, want nave-run read-only at /var/run/nave", c.Name, c.VolumeMounts)
		}
	}
}

// TestUntouched: the pods the injector leaves alone come back allowed
// with no patch.
func TestUntouched(t *testing.T) {
	in := newTestInjector(t, nil)
	for _, tc := range []struct{ name, namespace, pod string }{
		{"opted out by label", "shop", "metadata: {name: p, labels: {sidecar.istio.io/inject: \"false\"}}\nspec: {containers: [{name: a, image: a}]}"},
		{"opted out by the legacy annotation", "shop", "metadata: {name: p, annotations: {sidecar.istio.io/inject: \"false\"}}\nspec: {containers: [{name: a, image: a}]}"},
		{"label no", "shop", "metadata: {name: p, labels: {sidecar.istio.io/inject: \"no\"}}\nspec: {containers: [{name: a, image: a}]}"},
		{"hostNetwork", "shop", "metadata: {name: p}\nspec: {hostNetwork: true, containers: [{name: a, image: a}]}"},
		{"kube-system", "kube-system", minimalPod},
		{"kube-public", "kube-public", minimalPod},
		{"the spoke's namespace", "nave-system", minimalPod},
		{"another revision", "shop", "metadata: {name: p, labels: {istio.io/rev: canary}}\nspec: {containers: [{name: a, image: a}]}"},
		{"the status annotation", "shop", "metadata: {name: p, annotations: {sidecar.istio.io/status: \"{}\"}}\nspec: {containers: [{name: a, image: a}]}"},
		{"Istio's own sidecar", "shop", "metadata: {name: p}\nspec: {containers: [{name: a, image: a}, {name: istio-proxy, image: istio}]}"},
		{"a nave-proxy init container", "shop", "metadata: {name: p}\nspec: {initContainers: [{name: nave-proxy, image: x}], containers: [{name: a, image: a}]}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _, _ := review(t, in, podRequest(t, tc.namespace, []byte(tc.pod)))
			if !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 0 {
				t.Errorf("allowed=%v patch=%s warnings=%v: want allowed, untouched", resp.Allowed, resp.Patch, resp.Warnings)
			}
		})
	}

	t.Run("the label true wins over the legacy annotation false", func(t *testing.T) {
		src := "metadata: {name: p, labels: {sidecar.istio.io/inject: \"true\"}, annotations: {sidecar.istio.io/inject: \"false\"}}\nspec: {containers: [{name: a, image: a}]}"
		if resp, _, _ := review(t, in, podRequest(t, "shop", []byte(src))); resp.Patch == nil {
			t.Error("not injected")
		}
	})
	t.Run("this spoke's revision", func(t *testing.T) {
		in := newTestInjector(t, func(o *Options) { o.Revision = "canary" })
		src := "metadata: {name: p, labels: {istio.io/rev: canary}}\nspec: {containers: [{name: a, image: a}]}"
		if resp, _, _ := review(t, in, podRequest(t, "shop", []byte(src))); resp.Patch == nil {
			t.Error("not injected")
		}
	})
	t.Run("not a pod create", func(t *testing.T) {
		req := podRequest(t, "shop", []byte(minimalPod))
		req.Operation = admissionv1.Update
		if resp := in.Review(context.Background(), req); !resp.Allowed || resp.Patch != nil {
			t.Error("an UPDATE was not allowed untouched")
		}
		req = podRequest(t, "shop", []byte(minimalPod))
		req.Resource = metav1.GroupVersionResource{Version: "v1", Resource: "services"}
		if resp := in.Review(context.Background(), req); !resp.Allowed || resp.Patch != nil {
			t.Error("a Service was not allowed untouched")
		}
		req = podRequest(t, "shop", []byte(minimalPod))
		req.SubResource = "ephemeralcontainers"
		if resp := in.Review(context.Background(), req); !resp.Allowed || resp.Patch != nil {
			t.Error("a subresource was not allowed untouched")
		}
	})
}

// gatewayPod is a gateway Deployment's pod with annotations ann and more
// fields of its istio-proxy container.
func gatewayPod(ann, container string) string {
	return "metadata: {name: p, annotations: {" + ann + "}}\nspec: {containers: [{name: istio-proxy, image: auto" + container + "}]}"
}

// TestRefused: a pod whose annotations ask what the injector cannot do is
// denied with the annotation named and why.
func TestRefused(t *testing.T) {
	in := newTestInjector(t, nil)
	pod := func(ann string) string {
		return "metadata: {name: p, annotations: {" + ann + "}}\nspec: {containers: [{name: a, image: a}]}"
	}
	for _, tc := range []struct{ name, pod, field, reason string }{
		{"unknown template", pod(`inject.istio.io/templates: waypoint`), "metadata.annotations[inject.istio.io/templates]", `unknown template "waypoint"`},
		{"the gateway template with the sidecar", gatewayPod(`inject.istio.io/templates: "gateway,sidecar"`, ""), "metadata.annotations[inject.istio.io/templates]", `templates "gateway" and "sidecar" exclude each other`},
		{"the gateway template without istio-proxy", pod(`inject.istio.io/templates: gateway`), "spec.containers", "fills the pod's container named istio-proxy (image auto); the pod has none"},
		{"the gateway template with an image", "metadata: {name: p, annotations: {inject.istio.io/templates: gateway}}\nspec: {containers: [{name: istio-proxy, image: envoy}]}", "spec.containers[0].image", `"envoy": template gateway sets the proxy image`},
		{"the gateway template with a command", gatewayPod(`inject.istio.io/templates: gateway`, ", command: [envoy]"), "spec.containers[0].command", "leave command and args out"},
		{"the gateway template with an agent key", gatewayPod(`inject.istio.io/templates: gateway`, ", env: [{name: NAVE_MODE, value: grpc}]"), "spec.containers[0].env", "NAVE_MODE is set by template gateway"},
		{"the gateway template with a mount on the agent's", gatewayPod(`inject.istio.io/templates: gateway`, ", volumeMounts: [{name: x, mountPath: /var/run/nave}]"), "spec.containers[0].volumeMounts", "/var/run/nave is where template gateway mounts"},
		{"both templates", pod(`inject.istio.io/templates: "sidecar,grpc-agent"`), "metadata.annotations[inject.istio.io/templates]", "exclude each other"},
		{"a bad port", pod(`traffic.sidecar.istio.io/excludeOutboundPorts: "80,http"`), "metadata.annotations[traffic.sidecar.istio.io/excludeOutboundPorts]", `"http" is not a port`},
		{"port 0", pod(`traffic.sidecar.istio.io/excludeInboundPorts: "0"`), "metadata.annotations[traffic.sidecar.istio.io/excludeInboundPorts]", `"0" is not a port`},
		{"a bad included port", pod(`traffic.sidecar.istio.io/includeInboundPorts: "70000"`), "metadata.annotations[traffic.sidecar.istio.io/includeInboundPorts]", `"70000" is not a port`},
		{"a bad CIDR", pod(`traffic.sidecar.istio.io/excludeOutboundIPRanges: "10.0.0.0/33"`), "metadata.annotations[traffic.sidecar.istio.io/excludeOutboundIPRanges]", `"10.0.0.0/33" is not a CIDR`},
		{"a bad included CIDR", pod(`traffic.sidecar.istio.io/includeOutboundIPRanges: "everything"`), "metadata.annotations[traffic.sidecar.istio.io/includeOutboundIPRanges]", `"everything" is not a CIDR`},
		{"a bad quantity", pod(`sidecar.istio.io/proxyCPU: lots`), "metadata.annotations[sidecar.istio.io/proxyCPU]", "not a positive quantity"},
		{"a volume clash", "metadata: {name: p}\nspec: {containers: [{name: a, image: a}], volumes: [{name: nave-run, emptyDir: {}}]}", "spec.volumes", "already has a volume nave-run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _, _ := review(t, in, podRequest(t, "shop", []byte(tc.pod)))
			if resp.Allowed {
				t.Fatal("allowed")
			}
			if !strings.Contains(resp.Result.Message, tc.reason) || !strings.Contains(resp.Result.Message, tc.field) {
				t.Errorf("message %q: want the field %s and %q", resp.Result.Message, tc.field, tc.reason)
			}
			if d := resp.Result.Details; d == nil || len(d.Causes) != 1 || d.Causes[0].Field != tc.field {
				t.Errorf("details %+v: want one cause naming %s", d, tc.field)
			}
		})
	}

	t.Run("not enrolled", func(t *testing.T) {
		in := newTestInjector(t, func(o *Options) { o.Trust = notEnrolled })
		resp, _, _ := review(t, in, podRequest(t, "shop", []byte(minimalPod)))
		if want := "the sidecar injector refuses the pod: the spoke cannot give pods their mesh identity yet: not enrolled yet"; resp.Allowed || resp.Result.Message != want {
			t.Errorf("allowed=%v result=%+v: want a denial saying the spoke is not enrolled", resp.Allowed, resp.Result)
		}
	})
	t.Run("an object that is no pod", func(t *testing.T) {
		req := podRequest(t, "shop", []byte(minimalPod))
		req.Object.Raw = []byte(`{"spec": {"containers": "many"}}`)
		resp := in.Review(context.Background(), req)
		if resp.Allowed || !strings.Contains(resp.Result.Message, "cannot read the pod") {
			t.Errorf("allowed=%v result=%+v: want a denial saying the pod is unreadable", resp.Allowed, resp.Result)
		}
	})
}

func TestNewRefusesIncompleteOptions(t *testing.T) {
	for _, mod := range []func(*Options){
		func(o *Options) { o.SystemNamespace = "" }, func(o *Options) { o.Mesh = "" }, func(o *Options) { o.ProxyImage = "" },
		func(o *Options) { o.RAAddress = "" }, func(o *Options) { o.XDSAddress = "" }, func(o *Options) { o.Trust = nil },
	} {
		o := testOptions()
		mod(&o)
		if _, err := New(o); err == nil {
			t.Errorf("New accepted %+v", o)
		}
	}
}

func TestCanonicalNames(t *testing.T) {
	ctl := true
	for _, tc := range []struct {
		pod        corev1.Pod
		name, revn string
	}{
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "a", "version": "v1"}}}, "a", "v1"},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a", "app.kubernetes.io/name": "k"}}}, "k", "latest"},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "x-", OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-5d8f", Controller: &ctl}}}}, "web", "latest"},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "db-", OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db", Controller: &ctl}}}}, "db", "latest"},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "job-"}}, "job", "latest"},
	} {
		if n, r := canonical(&tc.pod); n != tc.name || r != tc.revn {
			t.Errorf("%+v: canonical %s %s, want %s %s", tc.pod.ObjectMeta, n, r, tc.name, tc.revn)
		}
	}
}

func TestStatus(t *testing.T) {
	st := newTestInjector(t, nil).Status()
	if st.Revision != "default" || st.TrustDomain != "cluster.local" || st.NotReady != "" || st.XDSAddress != "hub.example.com:15010" {
		t.Errorf("status %+v", st)
	}
	if st := newTestInjector(t, func(o *Options) { o.Trust = notEnrolled }).Status(); st.NotReady != "not enrolled yet" {
		t.Errorf("status %+v: want why pods are refused", st)
	}
}

// With inject.xdsFallbackAddress the agent is told the spoke's fallback
// xDS server, to list second in its bootstraps (docs/fallback.md).
func TestFallbackAddressReachesTheAgent(t *testing.T) {
	in := newTestInjector(t, func(o *Options) { o.XDSFallbackAddress = "nave-spoke-xds.nave-system.svc:15010" })
	_, pod, _ := review(t, in, podRequest(t, "shop", []byte(minimalPod)))
	if pod == nil {
		t.Fatal("refused")
	}
	if got := envOf(&pod.Spec.InitContainers[1])["NAVE_XDS_FALLBACK_ADDRESS"].Value; got != "nave-spoke-xds.nave-system.svc:15010" {
		t.Fatalf("NAVE_XDS_FALLBACK_ADDRESS = %q", got)
	}
	if _, ok := envOf(&pod.Spec.InitContainers[1])["NAVE_XDS_REPLICAS"]; ok {
		t.Error("NAVE_XDS_REPLICAS set without inject.xdsReplicas")
	}
}

// With inject.xdsReplicas the agent is told the hub's replicas, to list
// its namespace's home first (decision 051).
func TestReplicasReachTheAgent(t *testing.T) {
	replicas := []string{"nave-hub-0=nave-hub-0.nave-hub-gossip.nave-system.svc:15012", "nave-hub-1=nave-hub-1.nave-hub-gossip.nave-system.svc:15012"}
	in := newTestInjector(t, func(o *Options) { o.XDSReplicas = replicas })
	_, pod, _ := review(t, in, podRequest(t, "shop", []byte(minimalPod)))
	if pod == nil {
		t.Fatal("refused")
	}
	if got := envOf(&pod.Spec.InitContainers[1])["NAVE_XDS_REPLICAS"].Value; got != strings.Join(replicas, ",") {
		t.Fatalf("NAVE_XDS_REPLICAS = %q", got)
	}
}
