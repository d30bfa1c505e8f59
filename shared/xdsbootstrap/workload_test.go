package xdsbootstrap

import "testing"

func TestWorkloadNodeIDType(t *testing.T) {
	w := Workload{Namespace: "istio-system", Name: "ingress-7d9f-x2x", IP: "10.0.0.9"}
	if got, want := w.NodeID("cluster.local"), "sidecar~10.0.0.9~ingress-7d9f-x2x.istio-system~istio-system.svc.cluster.local"; got != want {
		t.Errorf("no proxy type: node id %q, want %q", got, want)
	}
	w.ProxyType = ProxyRouter
	if got, want := w.NodeID("cluster.local"), "router~10.0.0.9~ingress-7d9f-x2x.istio-system~istio-system.svc.cluster.local"; got != want {
		t.Errorf("router: node id %q, want %q", got, want)
	}
}
