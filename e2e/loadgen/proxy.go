package loadgen

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/shared/gen"
)

// Proxy is one Envoy-like ADS client: it subscribes to clusters and
// listeners (wildcard), then to the endpoints of every EDS cluster and the
// routes its listeners name, and ACKs every response. It records when it
// first held every type, and calls the scenario's watcher for each
// response.
type Proxy struct {
	ID    string
	delta bool
	node  *corev3.Node

	sotw discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	dlt  discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient

	sendMu sync.Mutex
	subs   map[string][]string // type → names subscribed (nil: wildcard)

	// Ready is closed once every type has been answered and ACKed.
	Ready   chan struct{}
	readyAt atomic.Int64 // unix nanos
	have    map[string]bool

	// Bytes counts resource bytes received; Responses every response.
	Bytes, Responses atomic.Int64

	watchMu sync.Mutex
	watch   func(p *Proxy, typeURL string, resources []*anypb.Any, at time.Time)
}

// Watch sets the function called for every response (nil: none).
func (p *Proxy) Watch(fn func(p *Proxy, typeURL string, resources []*anypb.Any, at time.Time)) {
	p.watchMu.Lock()
	p.watch = fn
	p.watchMu.Unlock()
}

// ReadyAt is when the proxy first held every type.
func (p *Proxy) ReadyAt() time.Time { return time.Unix(0, p.readyAt.Load()) }

// Connect opens proxy i's stream: sidecars spread over the namespaces.
func Connect(ctx context.Context, conn *grpc.ClientConn, i int, delta bool) (*Proxy, error) {
	ns := fmt.Sprint("ns-", i%Namespaces)
	id := fmt.Sprintf("sidecar~10.200.%d.%d~client-%d.%s~%s.svc.cluster.local", i/250, i%250+1, i, ns, ns)
	md, _ := structpb.NewStruct(map[string]any{"MESH": "default", "NAMESPACE": ns, "LABELS": map[string]any{"app": fmt.Sprint("client-", i)}})
	p := &Proxy{ID: id, delta: delta, node: &corev3.Node{Id: id, Metadata: md}, subs: map[string][]string{},
		Ready: make(chan struct{}), have: map[string]bool{}}
	c := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	var err error
	if delta {
		p.dlt, err = c.DeltaAggregatedResources(ctx)
	} else {
		p.sotw, err = c.StreamAggregatedResources(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", id, err)
	}
	go p.run()
	p.subscribe(gen.ClusterType, nil)
	p.subscribe(gen.ListenerType, nil)
	return p, nil
}

func (p *Proxy) subscribe(typeURL string, names []string) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	first := len(p.subs) == 0
	p.subs[typeURL] = names
	if p.delta {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names}
		if first {
			req.Node = p.node
		}
		_ = p.dlt.Send(req)
		return
	}
	req := &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names}
	if first {
		req.Node = p.node
	}
	_ = p.sotw.Send(req)
}

func (p *Proxy) ack(typeURL, version, nonce string) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.delta {
		_ = p.dlt.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: nonce})
		return
	}
	_ = p.sotw.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: p.subs[typeURL], VersionInfo: version, ResponseNonce: nonce})
}

func (p *Proxy) run() {
	for {
		var typeURL, version, nonce string
		var resources []*anypb.Any
		if p.delta {
			r, err := p.dlt.Recv()
			if err != nil {
				return
			}
			typeURL, version, nonce = r.GetTypeUrl(), r.GetSystemVersionInfo(), r.GetNonce()
			for _, res := range r.GetResources() {
				resources = append(resources, res.GetResource())
			}
		} else {
			r, err := p.sotw.Recv()
			if err != nil {
				return
			}
			typeURL, version, nonce, resources = r.GetTypeUrl(), r.GetVersionInfo(), r.GetNonce(), r.GetResources()
		}
		at := time.Now()
		p.Responses.Add(1)
		for _, a := range resources {
			p.Bytes.Add(int64(len(a.GetValue())))
		}
		// Learn what to subscribe to next, as Envoy does.
		switch typeURL {
		case gen.ClusterType:
			if !p.have[gen.EndpointType] {
				p.subscribe(gen.EndpointType, edsNames(resources))
			}
		case gen.ListenerType:
			if !p.have[gen.RouteType] {
				p.subscribe(gen.RouteType, routeNames(resources))
			}
		}
		p.ack(typeURL, version, nonce)
		p.watchMu.Lock()
		watch := p.watch
		p.watchMu.Unlock()
		if watch != nil {
			watch(p, typeURL, resources, at)
		}
		if !p.have[typeURL] {
			p.have[typeURL] = true
			if len(p.have) == 4 {
				p.readyAt.Store(at.UnixNano())
				close(p.Ready)
			}
		}
	}
}

func edsNames(resources []*anypb.Any) []string {
	var out []string
	for _, a := range resources {
		var c clusterv3.Cluster
		if a.UnmarshalTo(&c) == nil && c.GetType() == clusterv3.Cluster_EDS {
			out = append(out, c.GetName())
		}
	}
	sort.Strings(out)
	return out
}

func routeNames(resources []*anypb.Any) []string {
	seen := map[string]bool{}
	for _, a := range resources {
		var l listenerv3.Listener
		if a.UnmarshalTo(&l) != nil {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&hcm) == nil && hcm.GetRds() != nil {
					seen[hcm.GetRds().GetRouteConfigName()] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// assignmentHas reports whether an endpoint response carries cluster's
// assignment with an endpoint at address.
func assignmentHas(resources []*anypb.Any, cluster, address string) bool {
	for _, a := range resources {
		var cla endpointv3.ClusterLoadAssignment
		if a.UnmarshalTo(&cla) != nil || cla.GetClusterName() != cluster {
			continue
		}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				if e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress() == address {
					return true
				}
			}
		}
	}
	return false
}
