// Package loadgen drives a real nave-hub process with the load of issue 6's
// benchmark: spokes (the real uplink code, in process) push a mesh of
// services and endpoints across three clusters, and N proxies hold real ADS
// streams (state of the world or delta) behaving like Envoy. Scenarios
// measure how fast every proxy converges, what the hub spends (CPU-seconds,
// peak RSS) and how many bytes it sends. cmd/nave-load prints the table.
package loadgen

import (
	"fmt"
	"strings"

	"github.com/navemesh/nave/shared/meshconfig"
)

// Clusters are the workload clusters the spokes stand for.
var Clusters = []string{"c1", "c2", "c3"}

// Namespaces is how many namespaces services and proxies spread over.
const Namespaces = 10

// Workload is the mesh: Services ServiceEntries, each selecting Endpoints
// WorkloadEntries per cluster (locality region-1/zone-<cluster>).
type Workload struct {
	Services  int
	Endpoints int // per service per cluster
}

func serviceNS(i int) string   { return fmt.Sprint("ns-", i%Namespaces) }
func serviceHost(i int) string { return fmt.Sprintf("svc-%d.%s.svc.cluster.local", i, serviceNS(i)) }

// ClusterName is the Envoy cluster of service i.
func ClusterName(i int) string { return "outbound|80||" + serviceHost(i) }

// endpointAddress is endpoint j of service i in cluster c (index ci), at
// generation gen (S3 moves endpoints to new addresses).
func endpointAddress(i, ci, j, gen int) string {
	n := (i*16+j)*4 + ci + gen*65536
	return fmt.Sprintf("10.%d.%d.%d", 64+(n>>16)%64, (n>>8)&255, n&255)
}

// Objects returns cluster ci's config: every ServiceEntry (identical in
// all clusters, so no conflict) and its own WorkloadEntries. moved maps
// (service, endpoint) to a generation for endpoints S3 has moved.
func (w Workload) Objects(ci int, moved map[[2]int]int) ([]*meshconfig.Object, error) {
	var b strings.Builder
	for i := range w.Services {
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: svc-%d, namespace: %s}\n"+
			"spec:\n  hosts: [%s]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  location: MESH_INTERNAL\n"+
			"  resolution: STATIC\n  workloadSelector: {labels: {app: svc-%d}}\n", i, serviceNS(i), serviceHost(i), i)
		for j := range w.Endpoints {
			fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: svc-%d-%s-%d, namespace: %s}\n"+
				"spec: {address: %s, labels: {app: svc-%d}, locality: region-1/zone-%s}\n",
				i, Clusters[ci], j, serviceNS(i), endpointAddress(i, ci, j, moved[[2]int{i, j*len(Clusters) + ci}]), i, Clusters[ci])
		}
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), Clusters[ci]+".yaml")
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return objs, nil
}

// FanOutRule is S2's edit: a DestinationRule for service 0, which every
// proxy sees, whose connection pool limit changes — one cluster of every
// proxy changes (state of the world resends all clusters, delta one).
func FanOutRule(limit int) ([]*meshconfig.Object, error) {
	y := fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc-0, namespace: %s}\n"+
		"spec:\n  host: %s\n  trafficPolicy: {connectionPool: {tcp: {maxConnections: %d}}}\n", serviceNS(0), serviceHost(0), limit)
	objs, errs := meshconfig.DecodeYAML([]byte(y), "fanout.yaml")
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return objs, nil
}
