package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/kubenode"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// xdsWatcher is a proxyless delta ADS client of the hub, as a grpc-agent pod's would be (a
// workload certificate of mesh acme, node metadata GENERATOR grpc), dialled from the test
// process straight to a hub pod's address: it holds every cluster (wildcard) and the
// endpoints of the clusters of host, reconnects whenever its stream ends to a hub pod next
// chooses, telling the hub what it holds (initial_resource_versions), and records every
// removal it is sent and every assignment that leaves a cluster of host without endpoints.
type xdsWatcher struct {
	host string

	mu       sync.Mutex
	clusters map[string]string // name -> version
	// endpoints: cluster name of host -> its endpoints' addresses in the latest assignment
	endpoints map[string][]string
	versions  map[string]string // assignment versions, for initial_resource_versions
	removals  []string          // "cluster NAME" or "endpoints NAME", as sent
	emptied   []string          // clusters of host an assignment left without endpoints
	servers   []string          // hub pods that answered a stream, in order
}

// hubTrust is what a proxyless client of mesh acme holds: the hub's serving CA, to verify the
// hub by, and a workload certificate of mesh acme from the hub's CA Secret, as the spoke's RA
// would give a pod of namespace demo with service account watcher.
func hubTrust(ctx context.Context, t *testing.T, n *kubenode.Node, in *install) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	dir := t.TempDir()
	in.run(ctx, t, "cert", "issue", "--ca-store", "kubernetes", "--kubeconfig", n.Kubeconfig,
		"--mesh", "acme", "--trust-domain", "acme.example.com", "--namespace", "demo", "--service-account", "watcher", "--out", dir)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert-chain.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := servingcert.OpenStore("kubernetes", "", "nave-system", n.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rootPEM, err := servingcert.RootPEM(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatal("the hub's serving CA holds no certificate")
	}
	return roots, pair
}

// startWatcher runs an xdsWatcher of host until the test ends; next names the hub pod
// (as the watcher records it, and its address) each stream dials.
func startWatcher(ctx context.Context, t *testing.T, n *kubenode.Node, in *install, host string, next func() (string, string)) *xdsWatcher {
	t.Helper()
	roots, pair := hubTrust(ctx, t, n, in)
	creds := credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "xds.nave.example.com", Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	w := &xdsWatcher{host: host, clusters: map[string]string{}, endpoints: map[string][]string{}, versions: map[string]string{}}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wctx.Err() == nil {
			name, addr := next()
			if addr != "" {
				w.stream(wctx, name, addr, creds)
			}
			select {
			case <-wctx.Done():
			case <-time.After(200 * time.Millisecond): // the client's reconnect backoff
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *xdsWatcher) stream(ctx context.Context, server, addr string, creds credentials.TransportCredentials) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return
	}
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return
	}
	wl := xdsbootstrap.Workload{Mesh: "acme", Cluster: "east", Namespace: "demo", ServiceAccount: "watcher", Name: "watcher", IP: kubenode.Gateway}
	meta := wl.Metadata()
	meta[xdsbootstrap.MetaGenerator] = xdsbootstrap.GeneratorGRPC
	md, err := structpb.NewStruct(meta)
	if err != nil {
		return
	}
	w.mu.Lock()
	cds := &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: wl.NodeID(kubenode.ClusterDomain), Metadata: md}, TypeUrl: typeurl.Cluster,
		ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: maps.Clone(w.clusters)}
	var eds *discoveryv3.DeltaDiscoveryRequest
	if len(w.endpoints) > 0 {
		eds = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeurl.Endpoint, ResourceNamesSubscribe: keys(w.endpoints), InitialResourceVersions: maps.Clone(w.versions)}
	}
	w.mu.Unlock()
	if stream.Send(cds) != nil || (eds != nil && stream.Send(eds) != nil) {
		return
	}
	first := true
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		var subscribe []string
		w.mu.Lock()
		if first {
			w.servers = append(w.servers, server)
			first = false
		}
		switch resp.GetTypeUrl() {
		case typeurl.Cluster:
			for _, r := range resp.GetResources() {
				w.clusters[r.GetName()] = r.GetVersion()
				if _, ok := w.endpoints[r.GetName()]; !ok && strings.HasSuffix(r.GetName(), "|"+w.host) {
					w.endpoints[r.GetName()] = nil
					subscribe = append(subscribe, r.GetName())
				}
			}
			for _, name := range resp.GetRemovedResources() {
				delete(w.clusters, name)
				w.removals = append(w.removals, "cluster "+name)
			}
		case typeurl.Endpoint:
			for _, r := range resp.GetResources() {
				var cla endpointv3.ClusterLoadAssignment
				if r.GetResource().UnmarshalTo(&cla) != nil {
					continue
				}
				var addrs []string
				for _, le := range cla.GetEndpoints() {
					for _, e := range le.GetLbEndpoints() {
						sa := e.GetEndpoint().GetAddress().GetSocketAddress()
						addrs = append(addrs, net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())))
					}
				}
				if len(addrs) == 0 && len(w.endpoints[r.GetName()]) > 0 {
					w.emptied = append(w.emptied, r.GetName())
				}
				w.endpoints[r.GetName()], w.versions[r.GetName()] = addrs, r.GetVersion()
			}
			for _, name := range resp.GetRemovedResources() {
				w.removals = append(w.removals, "endpoints "+name)
			}
		}
		w.mu.Unlock()
		if stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}) != nil {
			return
		}
		if len(subscribe) > 0 && stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeurl.Endpoint, ResourceNamesSubscribe: subscribe}) != nil {
			return
		}
	}
}

// holds reports whether the watcher holds, for every one of hosts, a cluster and endpoints
// for each of its clusters it subscribed to.
func (w *xdsWatcher) holds(hosts ...string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range hosts {
		found := false
		for name := range w.clusters {
			if strings.HasSuffix(name, "|"+h) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("no cluster of %s among %v", h, keys(w.clusters))
		}
	}
	for name, addrs := range w.endpoints {
		if len(addrs) == 0 {
			return fmt.Errorf("no endpoints for %s", name)
		}
	}
	return nil
}

// state returns what the watcher recorded: removals, emptied clusters and the hub pods that
// answered its streams.
func (w *xdsWatcher) state() (removals, emptied, servers []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.removals), slices.Clone(w.emptied), slices.Clone(w.servers)
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// hubPods returns the hub's pods that are Ready and not being deleted, oldest first.
func hubPods(ctx context.Context, n *kubenode.Node) []podAddr {
	list, err := n.Client.CoreV1().Pods("nave-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nave-hub"})
	if err != nil {
		return nil
	}
	var out []podAddr
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && podReady(&p) && p.Status.PodIP != "" {
			out = append(out, podAddr{name: p.Name, uid: p.UID, addr: net.JoinHostPort(p.Status.PodIP, "15010"), created: p.CreationTimestamp.Time})
		}
	}
	slices.SortFunc(out, func(a, b podAddr) int { return a.created.Compare(b.created) })
	return out
}

// podAddr is a pod's name and uid and the address of one of its ports.
type podAddr struct {
	name, addr string
	uid        types.UID
	created    time.Time
}

// String names the pod and, since a StatefulSet's replacement pod keeps its name, its uid's
// first 8 characters (nave-hub-0/1a2b3c4d).
func (p podAddr) String() string {
	uid := string(p.uid)
	return p.name + "/" + uid[:min(8, len(uid))]
}
