package manifests_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/manifests"
	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/spoke/spokeconfig"
)

// The kustomizations the docs promise; any other one found under deploy/ is rendered too.
var want = []string{"hub", "spoke", "eastwest-gateway", "examples/vendor-hub", "examples/acme-east", "examples/globex-west", "examples/acme-north-polled"}

// rendered renders every kustomization under deploy/, by its path under deploy/.
func rendered(t *testing.T) map[string][]byte {
	t.Helper()
	root, err := manifests.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	deploy := filepath.Join(root, "deploy")
	dirs, err := manifests.Kustomizations(deploy)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, d := range dirs {
		rel, _ := filepath.Rel(deploy, d)
		b, err := manifests.Render(d)
		if err != nil {
			t.Fatal(err)
		}
		out[rel] = b
	}
	for _, w := range want {
		if _, ok := out[w]; !ok {
			t.Errorf("no kustomization deploy/%s (found %v)", w, dirs)
		}
	}
	return out
}

// TestRenderEveryKustomization renders every base and overlay under deploy/ with kustomize's
// API and checks what the workloads (Deployments, the hub's StatefulSet) promise: the binary's
// config file loads and validates; probes reach /healthz/ready and /healthz/live on the port
// admin.listen names; the pod runs non-root with a read-only root file system, no privilege escalation, no capabilities and the
// runtime's seccomp profile; requests and limits are set; a PodDisruptionBudget and a
// NetworkPolicy select the pods; every Service selecting them targets a port they have, and the
// NetworkPolicy opens it, and the admin port. A gateway's Deployment (the injector's gateway
// template fills its istio-proxy container) is checked as checkGatewayDeployment says.
func TestRenderEveryKustomization(t *testing.T) {
	for name, b := range rendered(t) {
		t.Run(name, func(t *testing.T) {
			objs, err := manifests.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			workloads := 0
			for _, o := range objs {
				if !slices.Contains(manifests.WorkloadKinds, o.GetKind()) {
					continue
				}
				workloads++
				if tmpl, _, _ := unstructured.NestedString(o.Object, "spec", "template", "metadata", "annotations", gatewayTemplateAnnotation); tmpl == "gateway" {
					checkGatewayDeployment(t, objs, o)
					continue
				}
				checkWorkload(t, objs, o)
			}
			if workloads == 0 {
				t.Fatalf("deploy/%s renders no Deployment or StatefulSet:\n%s", name, b)
			}
		})
	}
}

func checkWorkload(t *testing.T, objs []*unstructured.Unstructured, d *unstructured.Unstructured) {
	c, err := manifests.ContainerOf(objs, d.GetNamespace(), d.GetName(), d.GetName())
	if err != nil {
		t.Fatal(err)
	}
	// The config file the args name loads and validates with the binary's own loader.
	cfgFile := ""
	for _, a := range c.Args {
		if v, ok := cutPrefix(a, "--config="); ok {
			cfgFile = v
		}
	}
	if cfgFile == "" {
		t.Fatalf("%s: args %q name no --config=FILE", c.Workload, c.Args)
	}
	mount, ok := c.Mounts[filepath.Dir(cfgFile)]
	if !ok || mount.Files[filepath.Base(cfgFile)] == nil {
		t.Fatalf("%s: --config=%s is on no ConfigMap mount (mounts %v)", c.Workload, cfgFile, c.Mounts)
	}
	tmp := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(tmp, mount.Files[filepath.Base(cfgFile)], 0o600); err != nil {
		t.Fatal(err)
	}
	var adminListen string
	switch c.Binary {
	case hubconfig.Program:
		var cfg hubconfig.Config
		if err := settings.Load(c.Binary, &cfg, []string{"--config", tmp}, io.Discard); err != nil {
			t.Fatalf("%s: the config file does not load: %v", c.Workload, err)
		}
		adminListen = cfg.Admin.Listen
	case spokeconfig.Program:
		var cfg spokeconfig.Config
		err := settings.Load(c.Binary, &cfg, []string{"--config", tmp}, io.Discard)
		if err != nil && !bytes.Contains(mount.Files[filepath.Base(cfgFile)], []byte("REPLACE-WITH")) {
			t.Fatalf("%s: the config file does not load: %v", c.Workload, err)
		}
		adminListen = cfg.Admin.Listen
		if err != nil { // an example with a placeholder the operator fills in
			var m map[string]any
			if err := yaml.Unmarshal(mount.Files[filepath.Base(cfgFile)], &m); err != nil {
				t.Fatal(err)
			}
			adminListen, _ = m["admin"].(map[string]any)["listen"].(string)
		}
	default:
		t.Fatalf("%s: image %s is no nave binary", c.Workload, c.Image)
	}
	_, adminPort, err := net.SplitHostPort(adminListen)
	if err != nil {
		t.Fatalf("%s: admin.listen %q: %v", c.Workload, adminListen, err)
	}
	ports := map[string]int32{}
	for _, p := range c.Spec.Ports {
		ports[p.Name] = p.ContainerPort
		ports[strconv.Itoa(int(p.ContainerPort))] = p.ContainerPort
	}
	for probe, want := range map[string]*corev1.Probe{"/healthz/ready": c.Spec.ReadinessProbe, "/healthz/live": c.Spec.LivenessProbe} {
		if want == nil || want.HTTPGet == nil {
			t.Errorf("%s: no HTTP probe for %s", c.Workload, probe)
			continue
		}
		if want.HTTPGet.Path != probe || strconv.Itoa(int(ports[want.HTTPGet.Port.String()])) != adminPort {
			t.Errorf("%s: probe %s:%s; want %s on the admin port %s", c.Workload, want.HTTPGet.Port.String(), want.HTTPGet.Path, probe, adminPort)
		}
	}
	checkLeastPrivilege(t, c)
	pdb, np, allowed, served := selectedBy(t, objs, d, ports, c.Workload)
	if !pdb || !np {
		t.Errorf("%s: PodDisruptionBudget %v, NetworkPolicy %v; want both", c.Workload, pdb, np)
	}
	p, _ := strconv.Atoi(adminPort)
	for _, port := range append(served, int32(p)) {
		if np && !allowed[port] {
			t.Errorf("%s: no NetworkPolicy lets anyone reach port %d, which a Service or the probes use", c.Workload, port)
		}
	}
}

// TestHubReplicaNames checks what decision 051 and docs/replicas.md ask of the hub's workload in
// deploy/hub and the vendor hub: a StatefulSet (Parallel, RollingUpdate) whose serviceName is a
// headless Service selecting its pods, on their xDS port, without publishNotReadyAddresses (a
// pod's own name resolves only while it is Ready); the serving certificate the hub makes for
// tls.hosts valid, as a TLS client checks, for every pod's name under it (nave-hub-0.SERVICE.nave-system.svc, ...); and replicas.join a
// headless Service selecting the same pods with publishNotReadyAddresses (a starting replica finds
// its peers before it is ready).
func TestHubReplicaNames(t *testing.T) {
	all := rendered(t)
	for _, dir := range []string{"hub", "examples/vendor-hub"} {
		t.Run(dir, func(t *testing.T) {
			objs, err := manifests.Decode(all[dir])
			if err != nil {
				t.Fatal(err)
			}
			const ns = "nave-system"
			u := manifests.Find(objs, "StatefulSet", ns, "nave-hub")
			if u == nil {
				t.Fatal("no StatefulSet nave-system/nave-hub")
			}
			var sts appsv1.StatefulSet
			mustConvert(t, u, &sts)
			if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement || sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
				t.Errorf("podManagementPolicy %q, updateStrategy %q; want Parallel and RollingUpdate", sts.Spec.PodManagementPolicy, sts.Spec.UpdateStrategy.Type)
			}
			c, err := manifests.ContainerOf(objs, ns, "nave-hub", "nave-hub")
			if err != nil {
				t.Fatal(err)
			}
			headless := func(name string) *corev1.Service {
				t.Helper()
				u := manifests.Find(objs, "Service", ns, name)
				if u == nil {
					t.Fatalf("no Service %s/%s", ns, name)
				}
				var svc corev1.Service
				mustConvert(t, u, &svc)
				if svc.Spec.ClusterIP != corev1.ClusterIPNone {
					t.Errorf("Service %s: clusterIP %q; want None (headless)", name, svc.Spec.ClusterIP)
				}
				for k, v := range svc.Spec.Selector {
					if sts.Spec.Template.Labels[k] != v {
						t.Errorf("Service %s selects %s=%s, which the hub's pods lack", name, k, v)
					}
				}
				if len(svc.Spec.Selector) == 0 {
					t.Errorf("Service %s selects nothing", name)
				}
				return &svc
			}
			names := headless(sts.Spec.ServiceName)
			if names.Spec.PublishNotReadyAddresses {
				t.Errorf("Service %s (the StatefulSet's serviceName) publishes pods that are not ready", names.Name)
			}
			if !slices.ContainsFunc(names.Spec.Ports, func(p corev1.ServicePort) bool { return p.TargetPort.String() == "grpc-xds" }) {
				t.Errorf("Service %s ports %+v; want the xDS port grpc-xds", names.Name, names.Spec.Ports)
			}

			var cfg hubconfig.Config
			file := filepath.Join(t.TempDir(), "hub.yaml")
			if err := os.WriteFile(file, c.Mounts["/etc/nave"].Files["hub.yaml"], 0o600); err != nil {
				t.Fatal(err)
			}
			if err := settings.Load(hubconfig.Program, &cfg, []string{"--config", file}, io.Discard); err != nil {
				t.Fatal(err)
			}
			// the hub's certificate for tls.hosts, checked for each pod's name as a TLS client does
			cert := servingCert(t, cfg.TLS.Hosts)
			replicas := 1
			if sts.Spec.Replicas != nil {
				replicas = int(*sts.Spec.Replicas)
			}
			for i := range replicas {
				pod := fmt.Sprintf("%s-%d.%s.%s.svc", sts.Name, i, sts.Spec.ServiceName, ns)
				if err := cert.VerifyHostname(pod); err != nil {
					t.Errorf("tls.hosts %v: %v", cfg.TLS.Hosts, err)
				}
			}

			if len(cfg.Replicas.Join) != 1 {
				t.Fatalf("replicas.join %v; want the gossip Service's name", cfg.Replicas.Join)
			}
			svc, ok := strings.CutSuffix(cfg.Replicas.Join[0], "."+ns+".svc")
			if !ok {
				t.Fatalf("replicas.join %v; want SERVICE.%s.svc", cfg.Replicas.Join, ns)
			}
			if gossip := headless(svc); !gossip.Spec.PublishNotReadyAddresses {
				t.Errorf("Service %s (replicas.join) publishes only ready pods: a starting replica would not find its peers", svc)
			}
		})
	}
}

// servingCert is the hub's serving certificate for tls.hosts, made as the hub makes it
// (hub/servingcert, its CA in a temporary directory).
func servingCert(t *testing.T, hosts []string) *x509.Certificate {
	t.Helper()
	store, err := servingcert.OpenStore(ca.StoreDir, t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := servingcert.New(context.Background(), store, hosts, nil)
	if err != nil {
		t.Fatalf("tls.hosts %v: %v", hosts, err)
	}
	cert, err := c.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cert.Leaf
}

// gatewayTemplateAnnotation asks the injector for its gateway template.
const gatewayTemplateAnnotation = "inject.istio.io/templates"

// checkGatewayDeployment checks a gateway's Deployment: one istio-proxy container with image
// auto (the injector fills it), least privilege, requests and limits, a PodDisruptionBudget,
// and every Service selecting it targets a port the container declares.
func checkGatewayDeployment(t *testing.T, objs []*unstructured.Unstructured, d *unstructured.Unstructured) {
	c, err := manifests.ContainerOf(objs, d.GetNamespace(), d.GetName(), "istio-proxy")
	if err != nil {
		t.Fatal(err)
	}
	if c.Image != "auto" || len(c.Pod.Containers) != 1 {
		t.Errorf("%s: image %q, %d containers; want istio-proxy alone, image auto (the injector's)", c.Workload, c.Image, len(c.Pod.Containers))
	}
	ports := map[string]int32{}
	for _, p := range c.Spec.Ports {
		ports[p.Name] = p.ContainerPort
		ports[strconv.Itoa(int(p.ContainerPort))] = p.ContainerPort
	}
	checkLeastPrivilege(t, c)
	pdb, _, _, served := selectedBy(t, objs, d, ports, c.Workload)
	if !pdb || len(served) == 0 {
		t.Errorf("%s: PodDisruptionBudget %v, Service ports %v; want both", c.Workload, pdb, served)
	}
}

// checkLeastPrivilege checks that c's pod runs non-root with the runtime's seccomp profile, a
// read-only root file system, no privilege escalation, no capabilities, and requests and limits.
func checkLeastPrivilege(t *testing.T, c *manifests.Container) {
	t.Helper()
	sc, psc := c.Spec.SecurityContext, c.Pod.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0:
		t.Errorf("%s: the pod may run as root: %+v", c.Workload, psc)
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: seccomp profile %+v; want RuntimeDefault", c.Workload, psc.SeccompProfile)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: the root file system is writable", c.Workload)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: privilege escalation is allowed", c.Workload)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("%s: capabilities %+v; want ALL dropped and none added", c.Workload, sc.Capabilities)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Spec.Resources.Requests[r]; !ok {
			t.Errorf("%s: no %s request", c.Workload, r)
		}
		if _, ok := c.Spec.Resources.Limits[r]; !ok {
			t.Errorf("%s: no %s limit", c.Workload, r)
		}
	}
}

// selectedBy reads what selects d's pods in objs: whether a PodDisruptionBudget and a
// NetworkPolicy do, the ports NetworkPolicies open, and the container ports Services target
// (each must be one of ports).
func selectedBy(t *testing.T, objs []*unstructured.Unstructured, d *unstructured.Unstructured, ports map[string]int32, workload string) (
	pdb, np bool, allowed map[int32]bool, served []int32) {
	t.Helper()
	podLabels := d.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]any)
	selects := func(sel map[string]string) bool {
		for k, v := range sel {
			if podLabels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	allowed = map[int32]bool{} // ports some NetworkPolicy selecting the pods opens
	for _, o := range objs {
		switch o.GetKind() {
		case "Service":
			var s corev1.Service
			mustConvert(t, o, &s)
			if !selects(s.Spec.Selector) {
				continue
			}
			for _, p := range s.Spec.Ports {
				port, ok := ports[p.TargetPort.String()]
				if !ok {
					t.Errorf("Service %s: port %s targets %s, which %s's container does not have", s.Name, p.Name, p.TargetPort.String(), workload)
				}
				served = append(served, port)
			}
		case "PodDisruptionBudget":
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			pdb = pdb || selects(sel)
		case "NetworkPolicy":
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "podSelector", "matchLabels")
			if !selects(sel) {
				continue
			}
			np = true
			rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "ingress")
			for _, r := range rules {
				ps, _, _ := unstructured.NestedSlice(r.(map[string]any), "ports")
				for _, p := range ps {
					allowed[ports[fmt.Sprint(p.(map[string]any)["port"])]] = true
				}
			}
		}
	}
	return pdb, np, allowed, served
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}

func mustConvert(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// TestApplyRendered applies what every kustomization under deploy/ renders to a real
// kube-apiserver as an admin, by server-side apply: first as a dry run (the API server decodes,
// validates, defaults and admits every object and stores none), then for real, with no error.
// The Istio CRDs and the namespaces are applied first, as a dry run cannot create what later
// objects need. Bases and overlays go to the same API server in turn, as an upgrade would.
// Nothing runs the pods: no kubelet (they stay Pending).
func TestApplyRendered(t *testing.T) {
	all := rendered(t)
	k := kubetest.Start(t, kubetest.Options{})
	root, _ := manifests.ModuleRoot()
	crds, err := os.ReadFile(filepath.Join(root, "deploy", "spoke", "istio-crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.ReadFile(filepath.Join(root, "deploy", "hub", "namespace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The east-west gateway's own namespace, likewise.
	ewNS, err := os.ReadFile(filepath.Join(root, "deploy", "eastwest-gateway", "namespace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	k.Apply(t, crds, ns, ewNS)
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		t.Logf("applying deploy/%s", n)
		k.ApplyDryRun(t, all[n])
		k.Apply(t, all[n])
	}
}

// TestEastWestGateway checks what docs/multi-network.md promises of deploy/eastwest-gateway and
// of the overlay it documents, which sets the network: a LoadBalancer
// Service labelled with the network and networking.istio.io/gatewayPort exposing 15443 (tls)
// to the gateway's pods, which carry the same network label and ask for the gateway template,
// and a Gateway selecting them that serves 15443 in AUTO_PASSTHROUGH mode for *.local.
func TestEastWestGateway(t *testing.T) {
	base := rendered(t)["eastwest-gateway"]
	root, _ := manifests.ModuleRoot()
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, filepath.Join(root, "deploy", "eastwest-gateway"))
	if err != nil {
		t.Fatal(err)
	}
	doc := "resources:\n- " + rel + "\n" +
		"labels:\n- pairs: {topology.istio.io/network: acme-east}\n  includeTemplates: true\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	withNetwork, err := manifests.Render(overlay)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, network string
		stream        []byte
	}{{"base", "REPLACE-WITH-NETWORK", base}, {"overlay", "acme-east", withNetwork}} {
		network := tc.network
		t.Run(tc.name, func(t *testing.T) {
			objs, err := manifests.Decode(tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			const ns = "nave-eastwest"
			var svc corev1.Service
			u := manifests.Find(objs, "Service", ns, "eastwest-gateway")
			if u == nil {
				t.Fatal("no Service eastwest-gateway")
			}
			mustConvert(t, u, &svc)
			if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Labels["topology.istio.io/network"] != network ||
				svc.Labels["networking.istio.io/gatewayPort"] != "15443" {
				t.Errorf("Service type %s, labels %v; want LoadBalancer labelled with network %s and gateway port 15443", svc.Spec.Type, svc.Labels, network)
			}
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 15443 || svc.Spec.Ports[0].Name != "tls" {
				t.Errorf("Service ports %+v; want 15443 (tls) alone", svc.Spec.Ports)
			}
			var d appsv1.Deployment
			u = manifests.Find(objs, "Deployment", ns, "eastwest-gateway")
			if u == nil {
				t.Fatal("no Deployment eastwest-gateway")
			}
			mustConvert(t, u, &d)
			pod := d.Spec.Template
			if pod.Labels["topology.istio.io/network"] != network || pod.Annotations[gatewayTemplateAnnotation] != "gateway" ||
				pod.Labels["sidecar.istio.io/inject"] != "true" {
				t.Errorf("pod labels %v, annotations %v; want network %s, injected with the gateway template", pod.Labels, pod.Annotations, network)
			}
			for k, v := range svc.Spec.Selector {
				if pod.Labels[k] != v {
					t.Errorf("the Service selects %s=%s, which the pods lack", k, v)
				}
			}
			gw := manifests.Find(objs, "Gateway", ns, "cross-network-gateway")
			if gw == nil {
				t.Fatal("no Gateway cross-network-gateway")
			}
			sel, _, _ := unstructured.NestedStringMap(gw.Object, "spec", "selector")
			for k, v := range sel {
				if pod.Labels[k] != v {
					t.Errorf("the Gateway selects %s=%s, which the pods lack", k, v)
				}
			}
			servers, _, _ := unstructured.NestedSlice(gw.Object, "spec", "servers")
			if len(servers) != 1 {
				t.Fatalf("Gateway servers %v; want one", servers)
			}
			srv := servers[0].(map[string]any)
			port, _, _ := unstructured.NestedInt64(srv, "port", "number")
			proto, _, _ := unstructured.NestedString(srv, "port", "protocol")
			mode, _, _ := unstructured.NestedString(srv, "tls", "mode")
			hosts, _, _ := unstructured.NestedStringSlice(srv, "hosts")
			if port != 15443 || proto != "TLS" || mode != "AUTO_PASSTHROUGH" || !slices.Equal(hosts, []string{"*.local"}) {
				t.Errorf("Gateway server %v; want TLS 15443 AUTO_PASSTHROUGH for *.local", srv)
			}
		})
	}
}
