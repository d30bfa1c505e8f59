package inject

import (
	"bytes"
	"encoding/pem"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/spoke/agentconfig"
	"github.com/navemesh/nave/spoke/appprobe"
)

// podFieldValues stand in for the downward API's pod fields.
var podFieldValues = map[string]string{
	"metadata.name": "web-1", "metadata.namespace": "shop", "spec.serviceAccountName": "default",
	"status.podIP": "10.1.2.3", "spec.nodeName": "node-1",
}

// TestInjectedAgentLoadsItsConfig holds the two halves of the agent
// contract together: the environment the injector gives the agent
// container, downward-API fields resolved as the kubelet would, is a
// configuration nave-agent loads and validates, every NAVE_ variable is a
// key it knows, its mode is the template's, and the files it reads and
// writes are on the template's volumes. (TestSidecarTemplateContract
// checks the capture container's arguments.)
func TestInjectedAgentLoadsItsConfig(t *testing.T) {
	root := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: x509test.NewAuthority("mesh root").Cert.Raw}))
	hubCA := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: x509test.NewAuthority("hub ca").Cert.Raw}))
	known := map[string]bool{}
	for _, e := range settings.Reference(agentconfig.Program, &agentconfig.Config{}) {
		known[e.Env] = true
	}
	for _, tc := range []struct{ template, mode string }{{"sidecar", agentconfig.ModeEnvoy}, {"grpc-agent", agentconfig.ModeGRPC}} {
		t.Run(tc.template, func(t *testing.T) {
			in := newTestInjector(t, func(o *Options) {
				o.Trust = func() (Trust, error) {
					return Trust{TrustDomain: "cluster.local", MeshRoots: []byte(root), HubCA: []byte(hubCA)}, nil
				}
			})
			src := "metadata: {name: web-1, annotations: {inject.istio.io/templates: " + tc.template + "}}\n" +
				"spec: {containers: [{name: app, image: a, ports: [{name: http, containerPort: 8080}], livenessProbe: {httpGet: {path: /l, port: http}}, readinessProbe: {grpc: {port: 9090}}}]}\n"
			_, pod, _ := review(t, in, podRequest(t, "shop", []byte(src)))
			if pod == nil {
				t.Fatal("refused")
			}
			var agent *corev1.Container
			for i := range pod.Spec.InitContainers {
				if pod.Spec.InitContainers[i].Name == ProxyContainer {
					agent = &pod.Spec.InitContainers[i]
				}
			}
			if agent == nil {
				t.Fatalf("no %s container", ProxyContainer)
			}
			for _, e := range agent.Env {
				if !strings.HasPrefix(e.Name, "NAVE_") {
					continue
				}
				if !known[e.Name] {
					t.Errorf("the injector sets %s, which is no nave-agent key", e.Name)
				}
				v := e.Value
				if e.ValueFrom != nil {
					if e.ValueFrom.FieldRef == nil {
						t.Fatalf("%s: valueFrom other than fieldRef", e.Name)
					}
					var ok bool
					if v, ok = podFieldValues[e.ValueFrom.FieldRef.FieldPath]; !ok {
						t.Fatalf("%s: fieldRef %s the test does not stand in for", e.Name, e.ValueFrom.FieldRef.FieldPath)
					}
				}
				t.Setenv(e.Name, v)
			}
			var c agentconfig.Config
			if err := settings.Load(agentconfig.Program, &c, nil, &bytes.Buffer{}); err != nil {
				t.Fatalf("nave-agent refuses the injected environment: %v", err)
			}
			if c.Mode != tc.mode {
				t.Errorf("mode %q; want %q", c.Mode, tc.mode)
			}
			if id, err := c.WorkloadID(); err != nil || id.String() != "spiffe://cluster.local/ns/shop/sa/default" {
				t.Errorf("workload id %v (%v)", id, err)
			}
			// the agent runs the app's rewritten probes
			probers, err := appprobe.Parse(c.AppProbes)
			if err != nil || len(probers) != 2 || probers["/app-health/app/livez"].HTTPGet.Port != 8080 || probers["/app-health/app/readyz"].GRPC.Port != 9090 {
				t.Errorf("appProbes %q (%v); want the app's liveness (HTTP, 8080) and readiness (gRPC, 9090)", c.AppProbes, err)
			}
			// the paths the agent uses are on the volumes the template mounts
			mounted := func(p string) bool {
				for _, m := range agent.VolumeMounts {
					if p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/") {
						return true
					}
				}
				return false
			}
			for key, p := range map[string]string{"dir": c.Dir, "ra.tokenFile": c.RA.TokenFile, "pod.labelsFile": c.Pod.LabelsFile, "pod.annotationsFile": c.Pod.AnnotationsFile} {
				if !mounted(p) {
					t.Errorf("%s %s is on no volume of the agent container (%v)", key, p, agent.VolumeMounts)
				}
			}
		})
	}
}
