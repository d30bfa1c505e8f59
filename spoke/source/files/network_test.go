package files

import (
	"path/filepath"
	"testing"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
)

// WorkloadEntries and ServiceEntry endpoints without a network take
// their label's, else the cluster's (Options.Network); one that names its
// network keeps it.
func TestEntriesTakeTheClustersNetwork(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "entries.yaml"), `
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: plain, namespace: vms}
spec: {address: 10.9.0.1}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: own, namespace: vms}
spec: {address: 10.9.0.2, network: net-own}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: labelled, namespace: vms, labels: {topology.istio.io/network: net-label}}
spec: {address: 10.9.0.3}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: vms}
spec:
  hosts: [db.vms.example]
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.9.1.1}, {address: 10.9.1.2, network: net-own}]
`)
	r := start(t, dir, Options{Network: "net-files"})
	objs, _ := r.last()
	want := map[string]string{"plain": "net-files", "own": "net-own", "labelled": "net-label"}
	for _, o := range objs {
		switch spec := o.Spec.(type) {
		case *networkingv1alpha3.WorkloadEntry:
			if spec.GetNetwork() != want[o.Name] {
				t.Errorf("WorkloadEntry %s: network %q, want %q", o.Key(), spec.GetNetwork(), want[o.Name])
			}
			delete(want, o.Name)
		case *networkingv1alpha3.ServiceEntry:
			if eps := spec.GetEndpoints(); eps[0].GetNetwork() != "net-files" || eps[1].GetNetwork() != "net-own" {
				t.Errorf("ServiceEntry endpoints' networks %q, %q; want net-files, net-own", eps[0].GetNetwork(), eps[1].GetNetwork())
			}
		}
		if o.Version != o.ComputeVersion() {
			t.Errorf("%s %s: version %q, content %q", o.Kind.Kind, o.Key(), o.Version, o.ComputeVersion())
		}
	}
	if len(want) > 0 {
		t.Errorf("not published: %v; published [%s]", want, keys(objs))
	}
}
