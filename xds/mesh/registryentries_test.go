package mesh

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// vmEntries are WorkloadEntries of cluster c1 (namespace shop unless
// said): two selected by app=vm (one labelled by its metadata), and ones
// a Kubernetes Service must not select.
const vmEntries = `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: shop}
spec:
  address: 10.0.0.1
  labels: {app: vm, version: v1}
  ports: {http: 18080, grpc-vm: 19090}
  locality: us-east/zone-a/rack-1
  network: net-1
  weight: 3
  serviceAccount: vm-sa
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-2, namespace: shop, labels: {app: vm}}
spec: {address: 10.0.0.2}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-web, namespace: web}
spec: {address: 10.0.0.3, labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-dns, namespace: shop}
spec: {address: vm.example.com, labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: db, namespace: shop}
spec: {address: 10.0.0.4, labels: {app: db}}
`

// vmService is the registry Service vm.shop of a cluster: port http to
// target port 8080, grpc to the named target port grpc-vm, tcp without a
// target port.
func vmService(t *testing.T, clusterIP string) *meshconfig.Object {
	var addrs []string
	if clusterIP != "" {
		addrs = []string{clusterIP}
	}
	return registryObject(t, "Service", "vm", "shop", nil, &meshconfigv1.Service{
		Hostname: "vm.shop.svc.cluster.local", Addresses: addrs, Selector: map[string]string{"app": "vm"},
		Ports: []*meshconfigv1.ServicePort{
			{Name: "http", Number: 80, Protocol: "HTTP", TargetPort: 8080},
			{Name: "grpc", Number: 90, Protocol: "GRPC", TargetPortName: "grpc-vm"},
			{Name: "tcp", Number: 91, Protocol: "TCP"},
		},
	})
}

// endpointPorts renders an endpoint as address@cluster and, per service
// port, the port it is served on ("-" not served).
func endpointPorts(svc *Service, ep *Endpoint) string {
	var ports []string
	for _, p := range svc.Ports {
		if !ep.Serves(p) {
			ports = append(ports, p.Name+"=-")
			continue
		}
		ports = append(ports, fmt.Sprintf("%s=%d", p.Name, ep.PortFor(p)))
	}
	return ep.Address + "@" + ep.Cluster + " " + strings.Join(ports, ",")
}

func describeEndpoints(svc *Service) []string {
	var out []string
	for _, ep := range svc.Endpoints {
		out = append(out, endpointPorts(svc, ep))
	}
	return out
}

// TestServiceSelectsWorkloadEntries: a Kubernetes Service's selector picks
// the WorkloadEntries of its namespace and cluster that have an IP
// address, with their ports mapped as Istio maps them, and everything else
// of the entry kept (locality, network, weight, service account, labels).
func TestServiceSelectsWorkloadEntries(t *testing.T) {
	c1 := append(decode(t, vmEntries), vmService(t, "10.96.0.1"))
	// Cluster c2 defines the same entry names elsewhere, and a pod of the
	// service; its own copy of the service selects only these.
	c2 := append(decode(t, strings.ReplaceAll(strings.ReplaceAll(vmEntries, "name: vm-", "name: c2-vm-"), "10.0.0.", "10.2.0.")),
		registryObject(t, "Workload", "vm-pod", "shop", map[string]string{"app": "vm"}, &meshconfigv1.Workload{Address: "10.2.9.9", Ports: map[string]uint32{"http": 8080, "grpc": 9090}}))
	in := []ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: c1}, {Name: "c2", Synced: true, Connected: true, Objects: c2}}

	svc := Build("m", in).Services["vm.shop.svc.cluster.local"]
	if svc == nil {
		t.Fatal("no service vm.shop")
	}
	want := []string{
		// vm-1 serves http on its port named like the service port, grpc on
		// the port its target port names, tcp on the service port.
		"10.0.0.1@c1 http=18080,grpc=19090,tcp=91",
		// vm-2 has no ports: http on the target port; no grpc-vm port, so
		// no grpc.
		"10.0.0.2@c1 http=8080,grpc=-,tcp=91",
	}
	if got := describeEndpoints(svc); !slices.Equal(got, want) {
		t.Fatalf("endpoints of vm.shop (c1's Service only):\n%v\nwant\n%v", got, want)
	}
	ep := svc.Endpoints[0]
	if ep.Locality != (Locality{"us-east", "zone-a", "rack-1"}) || ep.Network != "net-1" || ep.Weight != 3 || ep.ServiceAccount != "vm-sa" ||
		ep.Health != Healthy || ep.Labels["version"] != "v1" || ep.Source != "c1:WorkloadEntry shop/vm-1" {
		t.Errorf("vm-1's endpoint: %+v", ep)
	}

	// c2 defines the service too: its copy selects c2's entries (and its
	// pods' Workloads as before); c1's selects c1's.
	in[1].Objects = append(in[1].Objects, vmService(t, "10.96.0.2"))
	svc = Build("m", in).Services["vm.shop.svc.cluster.local"]
	want = append(want, "10.2.0.1@c2 http=18080,grpc=19090,tcp=91", "10.2.0.2@c2 http=8080,grpc=-,tcp=91", "10.2.9.9@c2 http=8080,grpc=9090,tcp=91")
	if got := describeEndpoints(svc); !slices.Equal(got, want) {
		t.Fatalf("endpoints of vm.shop (both clusters' Services):\n%v\nwant\n%v", got, want)
	}

	// A headless Service selects pods only, as in Istio.
	in[0].Objects = append(decode(t, vmEntries), vmService(t, ""))
	in[1].Objects = c2
	if got := describeEndpoints(Build("m", in).Services["vm.shop.svc.cluster.local"]); len(got) != 0 {
		t.Errorf("a headless Service selects %v, want no WorkloadEntry", got)
	}
}

// TestIncrementalServiceSelectionMatchesFullBuild is
// TestIncrementalBuildMatchesFullBuild with Kubernetes Services selecting
// the WorkloadEntries: services defined in one or both clusters (one with
// a named target port, one sharing its host with a ServiceEntry), entries
// of both clusters moving, relabelled, ported, given a host name,
// removed, defined in both clusters; services turning headless.
func TestIncrementalServiceSelectionMatchesFullBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	apps, nss := []string{"a", "b", "c"}, []string{"ns-x", "ns-y"}
	service := func(app, ns string, headless bool) *meshconfig.Object {
		rs := &meshconfigv1.Service{Hostname: "svc-" + app + "." + ns + ".svc.cluster.local", Selector: map[string]string{"app": app},
			Ports: []*meshconfigv1.ServicePort{{Name: "http", Number: 80, TargetPort: 8080}, {Name: "grpc", Number: 90}}}
		if app == "c" {
			rs.Ports[1].TargetPortName = "grpc-vm"
		}
		if !headless {
			rs.Addresses = []string{"10.96.0.1"}
		}
		return registryObject(t, "Service", "svc-"+app, ns, nil, rs)
	}
	we := func(name, ns, app, addr string, ported bool) *meshconfig.Object {
		ports := ""
		if ported {
			ports = ", ports: {http: 18080, grpc-vm: 19090}"
		}
		return decodeOne(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: %s, namespace: %s}\n"+
			"spec: {address: %s, labels: {app: %s}%s}\n", name, ns, addr, app, ports))
	}
	objs := map[objectKey]*meshconfig.Object{}
	for _, ns := range nss {
		for _, app := range apps {
			objs[objectKey{"c1", "svc-" + ns + app}] = service(app, ns, false)
			if app != "b" {
				objs[objectKey{"c2", "svc-" + ns + app}] = service(app, ns, false)
			}
		}
		// A ServiceEntry selecting app a for svc-a's host: one host, two
		// selecting definitions.
		objs[objectKey{"c1", "se-" + ns}] = decodeOne(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"+
			"metadata: {name: se, namespace: %[1]s}\nspec:\n  hosts: [svc-a.%[1]s.svc.cluster.local]\n"+
			"  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: STATIC\n  workloadSelector: {labels: {app: a}}\n", ns))
	}
	clusters := []string{"c1", "c2"}
	for i := range 30 {
		cl := clusters[i%2]
		objs[objectKey{cl, fmt.Sprint("we-", i)}] = we(fmt.Sprint("we-", i), nss[i%2], apps[i%3], fmt.Sprintf("10.0.0.%d", i+1), i%4 == 0)
	}
	staleC2 := false
	selected := 0
	incremental := compareWithFullBuilds(t, 400, func() []ClusterInput { return twoClusters(objs, staleC2) }, func() {
		i := rng.IntN(40)
		cl := clusters[rng.IntN(2)]
		name, ns, app := fmt.Sprint("we-", i), nss[rng.IntN(2)], apps[rng.IntN(3)]
		addr := fmt.Sprintf("10.0.%d.%d", rng.IntN(3), 1+rng.IntN(40))
		switch r := rng.IntN(100); {
		case r < 55: // an entry moves, is relabelled, ported or added
			objs[objectKey{cl, name}] = we(name, ns, app, addr, rng.IntN(2) == 0)
		case r < 60: // an entry a Kubernetes Service may not select
			objs[objectKey{cl, name}] = we(name, ns, app, "vm-"+name+".example", false)
		case r < 78:
			delete(objs, objectKey{cl, name})
		case r < 84: // the same entry in both clusters: a conflict
			other := clusters[0]
			if cl == other {
				other = clusters[1]
			}
			objs[objectKey{other, name}] = we(name, ns, app, "10.9.9.9", false)
			objs[objectKey{cl, name}] = we(name, ns, app, addr, false)
		case r < 92: // a service turns headless, or back
			objs[objectKey{"c1", "svc-" + ns + app}] = service(app, ns, rng.IntN(3) == 0)
		default:
			staleC2 = !staleC2
		}
	}, func(full *Snapshot) {
		for _, svc := range full.Services {
			for _, ep := range svc.Endpoints {
				if strings.Contains(ep.Source, ":WorkloadEntry ") {
					selected++
				}
			}
		}
	})
	if incremental < 100 {
		t.Errorf("only %d of 400 builds were incremental: the test does not exercise the fast path", incremental)
	}
	if selected < 1000 {
		t.Errorf("only %d endpoints selected by Kubernetes Services over 400 builds: the test does not exercise the selection", selected)
	}
}
