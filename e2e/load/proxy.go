package load

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	proxylessgen "github.com/navemesh/nave/xds/gen/proxyless"
)

// ProxyKind is the kind of a simulated proxy.
type ProxyKind uint8

// Proxy kinds.
const (
	Sidecar   ProxyKind = iota // an Envoy sidecar: CDS and LDS wildcard, then EDS and RDS by name
	Gateway                    // an Envoy ingress gateway (router), subscribing like a sidecar
	Proxyless                  // a proxyless gRPC client: LDS by name, then RDS, CDS and EDS by name
)

func (k ProxyKind) String() string {
	return [...]string{"sidecar", "gateway", "proxyless"}[k]
}

// ProxySpec is one simulated proxy's identity and what it asks for first.
type ProxySpec struct {
	Index   int
	Kind    ProxyKind
	Cluster int // index of the cluster the proxy runs in
	Node    *corev3.Node
	// Listeners are the listener names a proxyless client asks for (the
	// targets it dials); nil for Envoy, which asks for every listener.
	Listeners []string
}

// Proxies returns n proxy identities: gateways router proxies in
// GatewayNamespace, proxyless gRPC clients, and the rest Envoy sidecars
// spread over the workload's namespaces and clusters (each with its
// cluster's locality). Every proxyless client dials service 0 (which the
// fan-out scenario edits) and two more services.
func Proxies(w *Workload, n, gateways, proxyless int) ([]ProxySpec, error) {
	if gateways < 0 || proxyless < 0 || gateways+proxyless > n {
		return nil, fmt.Errorf("%d gateways and %d proxyless clients do not fit in %d proxies", gateways, proxyless, n)
	}
	if n >= rangeSize {
		return nil, fmt.Errorf("%d proxies do not fit the address plan", n)
	}
	sidecars := n - gateways - proxyless
	out := make([]ProxySpec, 0, n)
	for i := range n {
		c := i % len(w.Clusters)
		region, zone := w.Locality(c)
		md := map[string]any{"MESH": "default", "CLUSTER_ID": w.Clusters[c]}
		p := ProxySpec{Index: i, Cluster: c}
		var id string
		ip := addr(proxyBase, i+1)
		switch {
		case i < sidecars:
			ns := fmt.Sprintf("ns-%d", i%w.Namespaces)
			p.Kind = Sidecar
			id = fmt.Sprintf("sidecar~%s~client-%d.%s~%s.svc.cluster.local", ip, i, ns, ns)
			md["NAMESPACE"] = ns
			md["LABELS"] = map[string]any{"app": fmt.Sprintf("client-%d", i)}
		case i < sidecars+gateways:
			p.Kind = Gateway
			id = fmt.Sprintf("router~%s~ingress-%d.%s~%s.svc.cluster.local", ip, i, GatewayNamespace, GatewayNamespace)
			md["NAMESPACE"] = GatewayNamespace
			labels := map[string]any{}
			for k, v := range GatewayLabels {
				labels[k] = v
			}
			md["LABELS"] = labels
		default:
			j := i - sidecars - gateways
			ns := fmt.Sprintf("ns-%d", i%w.Namespaces)
			p.Kind = Proxyless
			id = fmt.Sprintf("grpc-client-%d.%s", i, ns)
			delete(md, "CLUSTER_ID")
			md["NAMESPACE"] = ns
			seen := map[int]bool{}
			for _, s := range []int{0, (7*j + 1) % w.Services, (13*j + 2) % w.Services} {
				if !seen[s] {
					seen[s] = true
					p.Listeners = append(p.Listeners, proxylessgen.ListenerName(w.Hostname(s), ServicePort))
				}
			}
		}
		st, err := structpb.NewStruct(md)
		if err != nil {
			return nil, err
		}
		p.Node = &corev3.Node{Id: id, Metadata: st}
		if p.Kind != Proxyless {
			p.Node.Locality = &corev3.Locality{Region: region, Zone: zone}
		}
		out = append(out, p)
	}
	return out, nil
}
