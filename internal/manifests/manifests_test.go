package manifests_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/manifests"
	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/spoke/spokeconfig"
)

// The kustomizations the docs promise; any other one found under deploy/ is rendered too.
var want = []string{"hub", "spoke", "examples/vendor-hub", "examples/acme-east", "examples/globex-west", "examples/acme-north-polled"}

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
// API and checks what the Deployments promise: the binary's config file loads and validates;
// probes reach /healthz/ready and /healthz/live on the port admin.listen names; the pod runs
// non-root with a read-only root file system, no privilege escalation, no capabilities and the
// runtime's seccomp profile; requests and limits are set; a PodDisruptionBudget and a
// NetworkPolicy select the pods; every Service selecting them targets a port they have, and the
// NetworkPolicy opens it, and the admin port.
func TestRenderEveryKustomization(t *testing.T) {
	for name, b := range rendered(t) {
		t.Run(name, func(t *testing.T) {
			objs, err := manifests.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			deployments := 0
			for _, o := range objs {
				if o.GetKind() != "Deployment" {
					continue
				}
				deployments++
				checkDeployment(t, objs, o)
			}
			if deployments == 0 {
				t.Fatalf("deploy/%s renders no Deployment:\n%s", name, b)
			}
		})
	}
}

func checkDeployment(t *testing.T, objs []*unstructured.Unstructured, d *unstructured.Unstructured) {
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
		t.Fatalf("%s: args %q name no --config=FILE", c.Deployment, c.Args)
	}
	mount, ok := c.Mounts[filepath.Dir(cfgFile)]
	if !ok || mount.Files[filepath.Base(cfgFile)] == nil {
		t.Fatalf("%s: --config=%s is on no ConfigMap mount (mounts %v)", c.Deployment, cfgFile, c.Mounts)
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
			t.Fatalf("%s: the config file does not load: %v", c.Deployment, err)
		}
		adminListen = cfg.Admin.Listen
	case spokeconfig.Program:
		var cfg spokeconfig.Config
		err := settings.Load(c.Binary, &cfg, []string{"--config", tmp}, io.Discard)
		if err != nil && !bytes.Contains(mount.Files[filepath.Base(cfgFile)], []byte("REPLACE-WITH")) {
			t.Fatalf("%s: the config file does not load: %v", c.Deployment, err)
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
		t.Fatalf("%s: image %s is no nave binary", c.Deployment, c.Image)
	}
	_, adminPort, err := net.SplitHostPort(adminListen)
	if err != nil {
		t.Fatalf("%s: admin.listen %q: %v", c.Deployment, adminListen, err)
	}
	ports := map[string]int32{}
	for _, p := range c.Spec.Ports {
		ports[p.Name] = p.ContainerPort
		ports[strconv.Itoa(int(p.ContainerPort))] = p.ContainerPort
	}
	for probe, want := range map[string]*corev1.Probe{"/healthz/ready": c.Spec.ReadinessProbe, "/healthz/live": c.Spec.LivenessProbe} {
		if want == nil || want.HTTPGet == nil {
			t.Errorf("%s: no HTTP probe for %s", c.Deployment, probe)
			continue
		}
		if want.HTTPGet.Path != probe || strconv.Itoa(int(ports[want.HTTPGet.Port.String()])) != adminPort {
			t.Errorf("%s: probe %s:%s; want %s on the admin port %s", c.Deployment, want.HTTPGet.Port.String(), want.HTTPGet.Path, probe, adminPort)
		}
	}
	sc, psc := c.Spec.SecurityContext, c.Pod.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0:
		t.Errorf("%s: the pod may run as root: %+v", c.Deployment, psc)
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: seccomp profile %+v; want RuntimeDefault", c.Deployment, psc.SeccompProfile)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: the root file system is writable", c.Deployment)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: privilege escalation is allowed", c.Deployment)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("%s: capabilities %+v; want ALL dropped and none added", c.Deployment, sc.Capabilities)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Spec.Resources.Requests[r]; !ok {
			t.Errorf("%s: no %s request", c.Deployment, r)
		}
		if _, ok := c.Spec.Resources.Limits[r]; !ok {
			t.Errorf("%s: no %s limit", c.Deployment, r)
		}
	}
	podLabels := d.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]any)
	selects := func(sel map[string]string) bool {
		for k, v := range sel {
			if podLabels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	var pdb, np bool
	allowed := map[int32]bool{} // ports some NetworkPolicy selecting the pods opens
	var served []int32          // container ports some Service selecting the pods targets
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
					t.Errorf("Service %s: port %s targets %s, which %s's container does not have", s.Name, p.Name, p.TargetPort.String(), c.Deployment)
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
	if !pdb || !np {
		t.Errorf("%s: PodDisruptionBudget %v, NetworkPolicy %v; want both", c.Deployment, pdb, np)
	}
	p, _ := strconv.Atoi(adminPort)
	for _, port := range append(served, int32(p)) {
		if np && !allowed[port] {
			t.Errorf("%s: no NetworkPolicy lets anyone reach port %d, which a Service or the probes use", c.Deployment, port)
		}
	}
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
// The Istio CRDs and the namespace are applied first, as a dry run cannot create what later
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
	k.Apply(t, crds, ns)
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
