package kube

import (
	"slices"
	"testing"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

const networkEntries = `
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-plain, namespace: plain}
spec: {address: 10.9.0.1, labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-labelled, namespace: plain, labels: {topology.istio.io/network: net-vm}}
spec: {address: 10.9.0.2}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-field, namespace: east}
spec: {address: 10.9.0.3, network: net-field}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-east, namespace: east}
spec: {address: 10.9.0.4}
`

// TestKubeSourceNetworks runs the source against a real API server: a
// LoadBalancer Service's ingress, written through the status subresource,
// becomes its external addresses (then its externalIPs) and a change of
// the status alone is published; its network labels travel on the
// object; workloads and WorkloadEntries take their own network, else
// their namespace's label, else the cluster's (Options.Network).
func TestKubeSourceNetworks(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	c.Apply(t, repoFile(t, "deploy/spoke/istio-crds.yaml"))
	k := newClient(t, c)
	ctx := t.Context()

	k.namespace("east", map[string]string{meshconfig.NetworkLabel: "net-ns"})
	k.namespace("plain", nil)
	k.service(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "eastwest", Namespace: "plain",
			Labels: map[string]string{meshconfig.NetworkLabel: "net-1", meshconfig.GatewayPortLabel: "15443"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "eastwest"},
			ExternalIPs: []string{"192.0.2.50"},
			Ports:       []corev1.ServicePort{{Name: "tls", Port: 15443}}},
	})
	for _, ns := range []string{"east", "plain"} {
		k.service(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})
	}
	k.pod("east", "web-e", "", "10.1.0.1", true, map[string]string{"app": "web"})
	k.pod("plain", "web-p", "", "10.1.0.2", true, map[string]string{"app": "web"})
	k.pod("plain", "web-l", "", "10.1.0.3", true, map[string]string{"app": "web", meshconfig.NetworkLabel: "net-pod"})
	k.createSlice(sliceOf("east", "web-e", "web", map[string]int32{"http": 80}, sliceEndpoint{ip: "10.1.0.1", pod: "web-e", ready: true}))
	k.createSlice(sliceOf("plain", "web-p", "web", map[string]int32{"http": 80},
		sliceEndpoint{ip: "10.1.0.2", pod: "web-p", ready: true}, sliceEndpoint{ip: "10.1.0.3", pod: "web-l", ready: true}))
	c.Apply(t, []byte(networkEntries))

	setIngress := func(ingress ...corev1.LoadBalancerIngress) {
		t.Helper()
		svc, err := k.CoreV1().Services("plain").Get(ctx, "eastwest", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = ingress
		if _, err := k.CoreV1().Services("plain").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setIngress(corev1.LoadBalancerIngress{IP: "198.51.100.7"}, corev1.LoadBalancerIngress{Hostname: "lb.example.com"})

	src := runSource(t, c.Admin, Options{Network: "net-default"})
	externalAddresses := func(want ...string) func([]*meshconfig.Object) bool {
		return func(objs []*meshconfig.Object) bool {
			o := find(objs, "Service", "plain/eastwest")
			return o != nil && slices.Equal(o.Spec.(*meshconfigv1.Service).GetExternalAddresses(), want)
		}
	}
	objs := src.waitPublished(t, "the gateway's ingress and external IP",
		all(externalAddresses("198.51.100.7", "lb.example.com", "192.0.2.50"), has("WorkloadEntry", "east/vm-east"), has("Workload", "plain/web-l")))
	gw := find(objs, "Service", "plain/eastwest")
	if gw.Labels[meshconfig.NetworkLabel] != "net-1" || gw.Labels[meshconfig.GatewayPortLabel] != "15443" {
		t.Errorf("the gateway Service's labels %v lack its network and gateway port", gw.Labels)
	}
	for key, want := range map[string]string{"east/web-e": "net-ns", "plain/web-p": "net-default", "plain/web-l": "net-pod"} {
		if o := find(objs, "Workload", key); o == nil || o.Spec.(*meshconfigv1.Workload).GetNetwork() != want {
			t.Errorf("workload %s: %v, want network %s", key, o, want)
		}
	}
	for key, want := range map[string]string{"plain/vm-plain": "net-default", "plain/vm-labelled": "net-vm", "east/vm-field": "net-field", "east/vm-east": "net-ns"} {
		o := find(objs, "WorkloadEntry", key)
		if o == nil || o.Spec.(*networkingv1alpha3.WorkloadEntry).GetNetwork() != want {
			t.Errorf("WorkloadEntry %s: %v, want network %s", key, o, want)
			continue
		}
		if o.Version != o.ComputeVersion() {
			t.Errorf("WorkloadEntry %s: version %q, content %q", key, o.Version, o.ComputeVersion())
		}
	}

	// The injector reads the same namespace networks.
	if e, p := src.NamespaceNetwork("east"), src.NamespaceNetwork("plain"); e != "net-ns" || p != "net-default" {
		t.Errorf("NamespaceNetwork: east %q, plain %q; want net-ns, net-default", e, p)
	}

	// A change of the load balancer's status alone is published.
	setIngress(corev1.LoadBalancerIngress{IP: "198.51.100.8"})
	src.waitPublished(t, "the gateway's new ingress", externalAddresses("198.51.100.8", "192.0.2.50"))

	// The namespace's label changes the network of its workloads and entries.
	ns, err := k.CoreV1().Namespaces().Get(ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{meshconfig.NetworkLabel: "net-relabelled"}
	if _, err := k.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	src.waitPublished(t, "the namespace's new network", func(objs []*meshconfig.Object) bool {
		w, we := find(objs, "Workload", "plain/web-p"), find(objs, "WorkloadEntry", "plain/vm-plain")
		return w != nil && w.Spec.(*meshconfigv1.Workload).GetNetwork() == "net-relabelled" &&
			we != nil && we.Spec.(*networkingv1alpha3.WorkloadEntry).GetNetwork() == "net-relabelled"
	})
	if p := src.NamespaceNetwork("plain"); p != "net-relabelled" {
		t.Errorf("NamespaceNetwork(plain) = %q after the relabel, want net-relabelled", p)
	}
}

// The Service transform keeps the load balancer's ingress addresses and
// nothing else of the status; the external addresses list each once.
func TestServiceTransformKeepsIngress(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "ns"},
		Spec:       corev1.ServiceSpec{ExternalIPs: []string{"192.0.2.1", "198.51.100.1"}},
		Status: corev1.ServiceStatus{
			LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "198.51.100.1", Hostname: "ignored.example.com", Ports: []corev1.PortStatus{{Port: 1}}},
				{Hostname: "lb.example.com"}, {}}},
			Conditions: []metav1.Condition{{Type: "x"}},
		},
	}
	out, err := transformService(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service).Status
	if len(got.Conditions) != 0 || len(got.LoadBalancer.Ingress) != 2 || got.LoadBalancer.Ingress[0].Ports != nil {
		t.Errorf("transformed status %+v", got)
	}
	if a := externalAddresses(svc); !slices.Equal(a, []string{"198.51.100.1", "lb.example.com", "192.0.2.1"}) {
		t.Errorf("external addresses %v", a)
	}
}
