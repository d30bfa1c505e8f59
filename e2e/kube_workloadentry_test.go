package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// vmService is a Kubernetes Service whose selector picks no pod but the
// WorkloadEntries of a VM, through a named target port.
const vmService = `apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: Service
metadata: {name: vm, namespace: demo}
spec:
  selector: {app: vm}
  ports: [{name: grpc, port: 7070, targetPort: grpc-vm, appProtocol: grpc}]
`

const vmHost = "vm.demo.svc.cluster.local"

// vmWorkloadEntry is the VM's WorkloadEntry, serving grpc-vm on port at
// address.
func vmWorkloadEntry(address string, port int) []byte {
	return fmt.Appendf(nil, `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: demo}
spec:
  address: %s
  labels: {app: vm, version: v1}
  ports: {grpc-vm: %d}
  locality: us-east/zone-a
`, address, port)
}

// TestKubernetesServiceSelectsWorkloadEntry: a Kubernetes Service selects
// a WorkloadEntry of its namespace (Istio's
// PILOT_ENABLE_K8S_SELECT_WORKLOAD_ENTRIES), both in the real API server:
// a proxyless client watching the service's EDS gets the entry's address
// on the port its target port names, a grpc-go xDS client's calls reach
// the VM, and when the entry moves to another address both follow.
func TestKubernetesServiceSelectsWorkloadEntry(t *testing.T) {
	nsA, nsB := harness.NewNetNS(t), harness.NewNetNS(t)
	vmA, vmB := nsBackend(t, nsA, "vm-a", 17091), nsBackend(t, nsB, "vm-b", 17092)
	kc := kubeCluster(t)
	kc.Apply(t, []byte(vmService), vmWorkloadEntry(nsA.NSIP, vmA.port))

	h := newHub(t)
	newKubeSpoke(t, h, "cluster-a", kc)
	waitEndpoints(t, h, vmHost, fmt.Sprintf("cluster-a/v1/%d/healthy/us-east/zone-a", vmA.port))

	// A proxyless client watching the service's assignment.
	eds := build.ClusterName(vmHost, 7070, "")
	watch := dialADS(t, h, "vm-watcher.demo")
	got := watch.fetch(t, typeurl.Endpoint, eds)
	await := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			cla, _ := got[eds].(*endpointv3.ClusterLoadAssignment)
			addrs := gentest.AddressPorts(cla)
			if slices.Equal(addrs, []string{want}) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("EDS %s holds %v, want %s", eds, addrs, want)
			}
			got = watch.next(t, typeurl.Endpoint, time.Until(deadline))
		}
	}
	await(fmt.Sprintf("%s:%d", nsA.NSIP, vmA.port))

	c := startClient(t, h, "xds:///"+vmHost+":7070", "vm-client.demo")
	if got := tally(c.collect(t, firstOK(t, c, 30*time.Second), 50, 30*time.Second)); got["vm-a"] != 50 {
		t.Fatalf("calls to the Service: %s, want all on vm-a", describe(got))
	}

	// The VM moves: the entry's address changes in the API server.
	kc.Apply(t, vmWorkloadEntry(nsB.NSIP, vmB.port))
	await(fmt.Sprintf("%s:%d", nsB.NSIP, vmB.port))
	testwait.For(t, 30*time.Second, func() error {
		calls := c.calls()
		if len(calls) < 20 {
			return fmt.Errorf("%d calls", len(calls))
		}
		if got := tally(calls[len(calls)-20:]); got["vm-b"] != 20 {
			return fmt.Errorf("last calls: %s, want all on vm-b", describe(got))
		}
		return nil
	})
}
