package inject

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"os"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/navemesh/nave/internal/manifests"
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/spoke/agent"
	"github.com/navemesh/nave/spoke/agentconfig"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/proxy"
)

// TestGatewayTemplateContract checks what the gateway template makes of
// the pod: its istio-proxy container is the agent, in envoy mode with
// proxyType router, its readiness the agent's; nothing else is added —
// no capture, no sidecar, no app container changed — and the pod is not
// marked for mutual TLS.
func TestGatewayTemplateContract(t *testing.T) {
	in := newTestInjector(t, nil)
	src := "metadata: {name: gw-1, labels: {istio: ingressgateway}, annotations: {inject.istio.io/templates: gateway, traffic.sidecar.istio.io/excludeOutboundPorts: \"25\"}}\n" +
		"spec: {containers: [{name: istio-proxy, image: auto, ports: [{containerPort: 8080}], readinessProbe: {tcpSocket: {port: 8080}}}, {name: log, image: l, readinessProbe: {httpGet: {port: 9000, path: /r}}}]}\n"
	resp, pod, _ := review(t, in, podRequest(t, "istio-ingress", []byte(src)))
	if pod == nil {
		t.Fatalf("refused: %v", resp.Result)
	}
	if len(pod.Spec.InitContainers) != 0 || len(pod.Spec.Containers) != 2 {
		t.Fatalf("init containers %d, containers %d: want none added", len(pod.Spec.InitContainers), len(pod.Spec.Containers))
	}
	gw := container(pod.Spec.Containers, GatewayContainer)
	if gw.Image != "ghcr.io/navemesh/nave-proxy:test" || gw.Command[0] != "nave-agent" || gw.Args[0] != "run" || gw.RestartPolicy != nil {
		t.Errorf("istio-proxy runs %s %v %v (restart %v): want the proxy image's nave-agent run, an ordinary container", gw.Image, gw.Command, gw.Args, gw.RestartPolicy)
	}
	env := envOf(gw)
	if env["NAVE_MODE"].Value != "envoy" || env["NAVE_PROXY_TYPE"].Value != "router" {
		t.Errorf("NAVE_MODE %q NAVE_PROXY_TYPE %q: want envoy and router", env["NAVE_MODE"].Value, env["NAVE_PROXY_TYPE"].Value)
	}
	if _, ok := env["NAVE_PROXY_UID"]; ok {
		t.Error("a gateway has a proxy uid: nothing is captured")
	}
	if p := gw.ReadinessProbe; p == nil || p.TCPSocket == nil {
		t.Errorf("readiness probe %+v: want the pod's own kept", p)
	}
	if len(resp.Warnings) != 2 || !strings.Contains(strings.Join(resp.Warnings, "\n"), "captures no traffic") {
		t.Errorf("warnings %q: want the ignored capture annotation and the kept readiness probe", resp.Warnings)
	}
	if log := container(pod.Spec.Containers, "log"); log.ReadinessProbe.HTTPGet.Port.IntValue() != 9000 || len(log.Env) != 0 || len(log.VolumeMounts) != 0 {
		t.Error("the gateway template changed another container")
	}
	if _, ok := pod.Labels[LabelTLSMode]; ok {
		t.Errorf("labels %v: a gateway is not marked for mutual TLS", pod.Labels)
	}
	sc := gw.SecurityContext
	if sc == nil || *sc.RunAsUser != 1337 || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("security context %+v: want the agent's least privilege", sc)
	}

	t.Run("the agent's readiness without a probe of the pod's", func(t *testing.T) {
		_, pod, _ := review(t, in, podRequest(t, "istio-ingress", []byte(gatewayPod("inject.istio.io/templates: gateway", ""))))
		p := container(pod.Spec.Containers, GatewayContainer).ReadinessProbe
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz/ready" || p.HTTPGet.Port.IntValue() != 15021 {
			t.Errorf("readiness probe %+v: want /healthz/ready on 15021", p)
		}
	})
}

// TestGatewayPodGetsItsGatewayFromTheHub follows a gateway pod from its
// injection to the config the hub generates for it: the environment the
// template gives istio-proxy is a configuration nave-agent loads, its
// bootstrap's node (router~, the pod's labels) is a Router proxy for the
// hub, and that proxy's key selects the Gateway whose selector matches
// the pod's labels: it gets the Gateway's listener, on the target port
// of the Service in front of it.
func TestGatewayPodGetsItsGatewayFromTheHub(t *testing.T) {
	root := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: x509test.NewAuthority("mesh root").Cert.Raw}))
	in := newTestInjector(t, func(o *Options) {
		o.Trust = func() (Trust, error) {
			return Trust{TrustDomain: "cluster.local", MeshRoots: []byte(root), HubCA: []byte(root)}, nil
		}
	})
	src, err := os.ReadFile("testdata/pods/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, pod, _ := review(t, in, podRequest(t, "istio-ingress", src))
	if pod == nil {
		t.Fatal("refused")
	}
	gw := container(pod.Spec.Containers, GatewayContainer)
	fields := map[string]string{"metadata.name": "ingress-gateway-7d9f8c6b5-x2x4q", "metadata.namespace": "istio-ingress",
		"spec.serviceAccountName": "ingress-gateway", "status.podIP": "10.1.2.3", "spec.nodeName": "node-1"}
	for _, e := range gw.Env {
		if !strings.HasPrefix(e.Name, "NAVE_") {
			continue
		}
		v := e.Value
		if e.ValueFrom != nil {
			v = fields[e.ValueFrom.FieldRef.FieldPath]
		}
		t.Setenv(e.Name, v)
	}
	var cfg agentconfig.Config
	if err := settings.Load(agentconfig.Program, &cfg, nil, &bytes.Buffer{}); err != nil {
		t.Fatalf("nave-agent refuses the gateway's environment: %v", err)
	}
	doc, err := agent.Bootstrap(cfg, pod.Labels, pod.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(doc, b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if want := "router~10.1.2.3~ingress-gateway-7d9f8c6b5-x2x4q.istio-ingress~istio-ingress.svc.cluster.local"; b.GetNode().GetId() != want {
		t.Fatalf("node id %q, want %q", b.GetNode().GetId(), want)
	}
	p, err := proxy.FromNode(b.GetNode(), "m")
	if err != nil {
		t.Fatal(err)
	}
	if p.Type != proxy.Router || p.Labels["istio"] != "ingressgateway" || p.Namespace != "istio-ingress" {
		t.Fatalf("the hub sees %s %s %v: want a router in istio-ingress with the pod's labels", p.Type, p.Namespace, p.Labels)
	}

	snap := gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ingress-gateway, namespace: istio-ingress}
spec:
  hosts: [ingress-gateway.istio-ingress.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: STATIC
  endpoints: [{address: 10.1.2.3}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: web, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: other, namespace: shop}
spec:
  selector: {istio: eastwestgateway}
  servers: [{port: {number: 9000, name: tcp, protocol: TCP}, hosts: ["*"]}]
`})
	out := envoy.Generate(scope.New(snap, p.Key()), typeurl.Listener)
	names := gentest.Names(out.Resources[typeurl.Listener])
	if gentest.ByName(out, typeurl.Listener, envoy.OutboundListenerName("0.0.0.0", 8080)).Message == nil {
		t.Errorf("listeners %v: want the Gateway's on 8080 (its Service's target port)", names)
	}
	if gentest.ByName(out, typeurl.Listener, envoy.OutboundListenerName("0.0.0.0", 9000)).Message != nil {
		t.Errorf("listeners %v: the Gateway of another selector was served", names)
	}
}

// TestIngressGatewayExample renders examples/ingress-gateway as kubectl
// apply -k does and injects its Deployment's pod: the pod is injected
// with the gateway template and stays least privilege (non-root,
// read-only root file system, no capability, no API token), the Service
// targets ports the gateway has, and the HPA, the PDB and the Gateway
// select it.
func TestIngressGatewayExample(t *testing.T) {
	objs := renderedObjects(t, "../../examples/ingress-gateway")
	const ns, name = "istio-ingress", "ingress-gateway"
	get := func(kind, namespace string, into any) {
		t.Helper()
		o := manifests.Find(objs, kind, namespace, name)
		if o == nil {
			t.Fatalf("the example has no %s %s/%s", kind, namespace, name)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	if manifests.Find(objs, "Namespace", "", ns) == nil {
		t.Errorf("the example creates no namespace %s", ns)
	}
	var d appsv1.Deployment
	get("Deployment", ns, &d)
	var svc corev1.Service
	get("Service", ns, &svc)
	var hpa autoscalingv2.HorizontalPodAutoscaler
	get("HorizontalPodAutoscaler", ns, &hpa)
	var pdb policyv1.PodDisruptionBudget
	get("PodDisruptionBudget", ns, &pdb)
	var sa corev1.ServiceAccount
	get("ServiceAccount", ns, &sa)
	gwObj := manifests.Find(objs, "Gateway", ns, name)
	if gwObj == nil {
		t.Fatal("the example has no Gateway")
	}

	resp, injected, _ := review(t, newTestInjector(t, nil), podRequest(t, ns, podOf(t, &d, ns)))
	if injected == nil || resp.Patch == nil {
		t.Fatalf("the example's pod is not injected: %v", resp.Result)
	}
	if len(resp.Warnings) != 0 {
		t.Errorf("warnings %q", resp.Warnings)
	}
	if len(injected.Spec.InitContainers) != 0 || len(injected.Spec.Containers) != 1 {
		t.Errorf("containers %d, init containers %d: want the gateway alone", len(injected.Spec.Containers), len(injected.Spec.InitContainers))
	}
	gw := container(injected.Spec.Containers, GatewayContainer)
	if gw == nil || envOf(gw)["NAVE_PROXY_TYPE"].Value != "router" {
		t.Fatalf("no router agent in %+v", injected.Spec.Containers)
	}
	sc, psc := gw.SecurityContext, injected.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || *sc.RunAsUser == 0 || len(sc.Capabilities.Add) != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("pod security %+v, container %+v: want non-root, RuntimeDefault seccomp, read-only root, no escalation, no capability", psc, sc)
	}
	if injected.Spec.AutomountServiceAccountToken == nil || *injected.Spec.AutomountServiceAccountToken || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the gateway mounts the service account's API token; it needs only the projected istio-ca token")
	}
	if _, ok := gw.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("the gateway has no memory limit")
	}
	ports := map[int32]bool{}
	for _, p := range gw.Ports {
		ports[p.ContainerPort] = true
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("Service type %s, want LoadBalancer", svc.Spec.Type)
	}
	var svcPorts []int32
	for _, p := range svc.Spec.Ports {
		svcPorts = append(svcPorts, p.Port)
		if !ports[int32(p.TargetPort.IntValue())] {
			t.Errorf("Service port %d targets %s, which the gateway does not declare", p.Port, p.TargetPort.String())
		}
	}
	if !slices.Equal(svcPorts, []int32{80, 443}) {
		t.Errorf("Service ports %v, want 80 and 443", svcPorts)
	}
	selects := func(sel map[string]string) bool {
		for k, v := range sel {
			if injected.Labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	gwSel, _, _ := unstructured.NestedStringMap(gwObj.Object, "spec", "selector")
	if !selects(svc.Spec.Selector) || !selects(pdb.Spec.Selector.MatchLabels) || !selects(gwSel) {
		t.Errorf("selectors: Service %v, PDB %v, Gateway %v; want each to select the pod's labels %v", svc.Spec.Selector, pdb.Spec.Selector.MatchLabels, gwSel, injected.Labels)
	}
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != d.Name || hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 {
		t.Errorf("HPA %+v: want the Deployment, at least 2 replicas", hpa.Spec)
	}
}

// TestEastWestGatewayDeploy: the pod of deploy/eastwest-gateway is injected as a router agent on
// the network its label names (node metadata NETWORK), with nothing added that it does not
// declare (docs/multi-network.md).
func TestEastWestGatewayDeploy(t *testing.T) {
	objs := renderedObjects(t, "../../deploy/eastwest-gateway")
	const ns, name = "nave-eastwest", "eastwest-gateway"
	u := manifests.Find(objs, "Deployment", ns, name)
	if u == nil {
		t.Fatalf("no Deployment %s/%s", ns, name)
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatal(err)
	}
	in := newTestInjector(t, func(o *Options) { o.Network = func(string) string { return "the-spokes" } })
	resp, injected, _ := review(t, in, podRequest(t, ns, podOf(t, &d, ns)))
	if injected == nil || resp.Patch == nil {
		t.Fatalf("the gateway's pod is not injected: %v", resp.Result)
	}
	if len(resp.Warnings) != 0 {
		t.Errorf("warnings %q", resp.Warnings)
	}
	gw := container(injected.Spec.Containers, GatewayContainer)
	if gw == nil || envOf(gw)["NAVE_PROXY_TYPE"].Value != "router" {
		t.Fatalf("no router agent in %+v", injected.Spec.Containers)
	}
	if got, want := envOf(gw)["NAVE_NETWORK"].Value, d.Spec.Template.Labels["topology.istio.io/network"]; got != want || got == "" {
		t.Errorf("NAVE_NETWORK = %q, want the pod's label %q", got, want)
	}
}

// renderedObjects renders the kustomization in dir.
func renderedObjects(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	stream, err := manifests.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(stream)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// podOf is a pod of Deployment d in namespace ns, as the API server
// receives it (JSON).
func podOf(t *testing.T, d *appsv1.Deployment, ns string) []byte {
	t.Helper()
	pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: d.Spec.Template.ObjectMeta, Spec: d.Spec.Template.Spec}
	pod.Namespace, pod.GenerateName = ns, d.Name+"-5c7d9-"
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
