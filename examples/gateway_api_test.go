package examples_test

import (
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/internal/manifests"
	"github.com/navemesh/nave/shared/meshconfig"
)

// TestGatewayAPIExample: the Gateway API example's gateway deployment
// serves its Gateway (the pods carry the Gateway's name label and ask for
// the gateway template; the Service selects them and has each listener's
// port), asks for no API access, and its Gateway API objects pass the
// validation the spoke applies.
func TestGatewayAPIExample(t *testing.T) {
	stream, err := manifests.Render("gateway-api")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(stream)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "web-gateway"
	get := func(kind, name string, into any) {
		t.Helper()
		o := manifests.Find(objs, kind, ns, name)
		if o == nil {
			t.Fatalf("the example has no %s %s/%s", kind, ns, name)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		if k := o.GetKind(); k == "Role" || k == "ClusterRole" || k == "RoleBinding" || k == "ClusterRoleBinding" {
			t.Errorf("the gateway is granted API access: %s %s", k, o.GetName())
		}
	}
	var d appsv1.Deployment
	get("Deployment", "web-gateway", &d)
	var svc corev1.Service
	get("Service", "web-gateway", &svc)
	var sa corev1.ServiceAccount
	get("ServiceAccount", "web-gateway", &sa)
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the gateway's ServiceAccount mounts an API token")
	}
	pod := d.Spec.Template
	if pod.Annotations["inject.istio.io/templates"] != "gateway" || pod.Spec.ServiceAccountName != sa.Name {
		t.Errorf("pod template %+v: want the gateway injection template and the gateway's ServiceAccount", pod.ObjectMeta)
	}
	gw := manifests.Find(objs, "Gateway", ns, "web")
	if gw == nil {
		t.Fatal("the example has no Gateway web")
	}
	if got := pod.Labels["gateway.networking.k8s.io/gateway-name"]; got != gw.GetName() {
		t.Errorf("pods labelled gateway-name %q, want the Gateway's name %q", got, gw.GetName())
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("the Service does not select the gateway's pods")
	}

	// The Gateway API objects, as the spoke validates them (the files
	// source, navectl analyze, and the Kubernetes source alike).
	var docs []byte
	for _, o := range objs {
		if o.GroupVersionKind().Group == meshconfig.GroupGatewayAPI {
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(append(docs, "---\n"...), b...)
		}
	}
	route, err := os.ReadFile("gateway-api/route.yaml")
	if err != nil {
		t.Fatal(err)
	}
	decoded, errs := meshconfig.DecodeYAML(append(docs, append([]byte("---\n"), route...)...), "gateway-api")
	if len(errs) != 0 || len(decoded) != 3 {
		t.Fatalf("decoded %d objects, errors %v; want the GatewayClass, the Gateway and the route", len(decoded), errs)
	}
	for _, o := range decoded {
		if o.Kind.Kind != "KubernetesGateway" {
			continue
		}
		spec, err := meshconfig.GatewayAPISpec(o)
		if err != nil {
			t.Fatal(err)
		}
		ports := map[int32]bool{}
		for _, p := range svc.Spec.Ports {
			ports[p.Port] = true
		}
		for _, l := range spec.(*gatewayv1.GatewaySpec).Listeners {
			if !ports[l.Port] {
				t.Errorf("listener %s: the Service has no port %d", l.Name, l.Port)
			}
		}
	}
}
