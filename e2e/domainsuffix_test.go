package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
)

// TestDomainSuffixIsTheClusters runs a cluster whose DNS suffix is not
// cluster.local: its spoke says so (domainSuffix), and the hub completes
// the cluster's short host names with it. The DestinationRule and
// VirtualService name the service by its short name, "echo"; every call
// must follow the VirtualService to subset v2 (issue 18 item 9: the hub
// completed with a constant cluster.local, so the rules missed the
// service and calls spread over both backends).
func TestDomainSuffixIsTheClusters(t *testing.T) {
	const host = "echo.demo.svc.corp.example"
	v1, v2 := startBackend(t, "echo-v1"), startBackend(t, "echo-v2")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mesh.yaml"), fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [%s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  location: MESH_INTERNAL
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v1, namespace: demo}
spec: {address: 127.0.0.1, ports: {grpc: %d}, labels: {app: echo, version: v1}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v2, namespace: demo}
spec: {address: 127.0.0.1, ports: {grpc: %d}, labels: {app: echo, version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - route:
    - destination: {host: echo, subset: v2}
`, host, v1.port, v2.port))

	h := newHub(t)
	sp := &spoke{admin: harness.FreePort(t), dir: dir}
	sp.proc = harness.Start(t, "spoke-corp", binary("nave-spoke"),
		"--source", "fs://"+dir, "--cluster", "corp", "--domain-suffix", "corp.example",
		"--hub.address", addr(h.spokes), "--hub.plaintext", "--hub.state-dir", t.TempDir(), "--admin.listen", addr(sp.admin), "--log.level", "debug")
	harness.WaitReady(t, sp.url("/healthz/ready"), 20*time.Second)

	c := startClient(t, h, "xds:///"+host+":7070", "corp.demo")
	calls := c.collect(t, firstOK(t, c, 30*time.Second), 100, 30*time.Second)
	if got := tally(calls); got["echo-v2"] != len(calls) {
		t.Fatalf("calls: %s, want all on echo-v2 (the VirtualService of the short host echo)", describe(got))
	}
	var spokes []struct {
		Cluster      string `json:"cluster"`
		DomainSuffix string `json:"domainSuffix"`
	}
	if err := harness.GetJSON(h.url("/debug/spokes"), &spokes); err != nil {
		t.Fatal(err)
	}
	if len(spokes) != 1 || spokes[0].DomainSuffix != "corp.example" {
		t.Errorf("/debug/spokes: %+v, want cluster corp with domainSuffix corp.example", spokes)
	}
}
