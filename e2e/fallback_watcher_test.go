package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/shared/typeurl"
)

// removalWatcher is a delta ADS client that prefers the hub and uses the
// spoke while the hub cannot be reached (as a bootstrap listing both
// does), keeping what it holds across servers (initial_resource_versions),
// and records every removal any server sends it (docs/design.md invariant 8:
// no proxy sees a removal no spoke made).
type removalWatcher struct {
	mu       sync.Mutex
	held     map[string]map[string]string // type URL -> name -> version
	removals []string
	servers  map[string]int // responses per server address
	cancel   context.CancelFunc
	done     chan struct{}
}

func startRemovalWatcher(t testing.TB, nodeID string, addrs ...string) *removalWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &removalWatcher{held: map[string]map[string]string{}, servers: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			for _, a := range addrs {
				if ctx.Err() != nil {
					return
				}
				w.session(ctx, a, nodeID)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *removalWatcher) stop() {
	w.cancel()
	<-w.done
}

// session runs one stream to addr until it fails.
func (w *removalWatcher) session(ctx context.Context, addr, nodeID string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return
	}
	node := &corev3.Node{Id: nodeID, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"NAMESPACE": structpb.NewStringValue("demo")}}}
	for _, typeURL := range []string{typeurl.Cluster, typeurl.Endpoint} {
		w.mu.Lock()
		initial := map[string]string{}
		for n, v := range w.held[typeURL] {
			initial[n] = v
		}
		w.mu.Unlock()
		if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNamesSubscribe: []string{"*"},
			InitialResourceVersions: initial}); err != nil {
			return
		}
	}
	for {
		r, err := s.Recv()
		if err != nil {
			return
		}
		w.mu.Lock()
		w.servers[addr]++
		if w.held[r.GetTypeUrl()] == nil {
			w.held[r.GetTypeUrl()] = map[string]string{}
		}
		for _, res := range r.GetResources() {
			w.held[r.GetTypeUrl()][res.GetName()] = res.GetVersion()
		}
		for _, n := range r.GetRemovedResources() {
			if _, ok := w.held[r.GetTypeUrl()][n]; ok {
				w.removals = append(w.removals, addr+" "+n)
			}
			delete(w.held[r.GetTypeUrl()], n)
		}
		w.mu.Unlock()
		if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
			return
		}
	}
}

// snapshot returns the removals so far, how many resources are held and
// the responses per server.
func (w *removalWatcher) snapshot() (removals []string, held int, servers map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, byName := range w.held {
		held += len(byName)
	}
	servers = map[string]int{}
	for k, v := range w.servers {
		servers[k] = v
	}
	return append([]string(nil), w.removals...), held, servers
}
