package ads

import (
	"sort"
	"strconv"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/hub/pushctx"
	"github.com/navemesh/nave/shared/proxy"
)

// sotwStream and deltaStream send responses (through a sender).
type (
	sotwStream interface {
		Send(*discoveryv3.DiscoveryResponse) error
	}
	deltaStream interface {
		Send(*discoveryv3.DeltaDiscoveryResponse) error
	}
)

// conn is one proxy stream. Its fields are written by the stream's own
// goroutine; mu guards them against /debug readers.
type conn struct {
	server      *Server
	id          string
	nodeID      string
	mesh        string
	proxy       *proxy.Proxy
	key         proxy.Key
	peer        string
	connectedAt time.Time
	delta       bool // incremental ADS

	mu    sync.Mutex
	nonce uint64
	types map[string]*typeState
}

type typeState struct {
	requested bool
	wildcard  bool
	names     map[string]bool
	// nonce of the last response; requests echoing another nonce are stale.
	nonce       string
	sentVersion string
	sentHashes  map[string]string
	sentAt      time.Time
	acked       string
	nacked      string
	nackReason  string

	// Delta only. sentHashes is what the proxy holds (name → version, from
	// our responses or its initial_resource_versions). pending maps the
	// nonces not yet ACKed to their system version; absent holds subscribed
	// names already reported as removed because they do not exist.
	answered bool
	pending  map[string]pendingResponse
	absent   map[string]bool

	// changedAt is when the change the last response carries was reported
	// (zero for answers to requests): its ACK observes convergence.
	changedAt time.Time
}

// pendingResponse is a delta response not yet ACKed.
type pendingResponse struct {
	version   string
	changedAt time.Time
}

// trigger names why a response is sent (metric label).
func trigger(st *pushctx.State, request bool) string {
	switch {
	case request:
		return "request"
	case st.Diff.Config:
		return "config"
	}
	return "endpoints"
}

// converged observes how long a change took to be ACKed by the proxy.
func (c *conn) converged(typeURL string, changedAt time.Time) {
	if !changedAt.IsZero() {
		c.server.metrics.convergence.WithLabelValues(shortType(typeURL)).Observe(time.Since(changedAt).Seconds())
	}
}

func (c *conn) handle(stream sotwStream, st *pushctx.State, req *discoveryv3.DiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	if !knownType(typeURL) {
		c.server.log.Debug("request for a type this hub does not serve", "conn", c.id, "type", typeURL)
		return nil
	}
	c.mu.Lock()
	ts := c.types[typeURL]
	if ts == nil {
		ts = &typeState{names: map[string]bool{}}
		c.types[typeURL] = ts
	}
	if req.GetResponseNonce() != "" && req.GetResponseNonce() != ts.nonce {
		c.mu.Unlock()
		return nil // stale: answers a response superseded since
	}
	if req.GetResponseNonce() != "" {
		if e := req.GetErrorDetail(); e != nil {
			ts.nacked, ts.nackReason = ts.sentVersion, e.GetMessage()
			c.server.metrics.nacks.WithLabelValues(shortType(typeURL)).Inc()
			c.server.log.Warn("proxy rejected config", "conn", c.id, "type", shortType(typeURL), "version", ts.sentVersion, "reason", e.GetMessage())
		} else {
			ts.acked = req.GetVersionInfo()
			ts.nacked, ts.nackReason = "", ""
			c.converged(typeURL, ts.changedAt)
			ts.changedAt = time.Time{}
		}
	}
	first := !ts.requested
	ts.requested = true
	changed := ts.subscribe(typeURL, req.GetResourceNames(), first)
	c.mu.Unlock()
	if first || changed {
		return c.push(stream, st, typeURL, true)
	}
	return nil
}

// subscribe updates the subscription and reports whether it changed. An
// empty first request for a type names the legacy wildcard.
func (ts *typeState) subscribe(typeURL string, names []string, first bool) bool {
	wildcard := false
	set := make(map[string]bool, len(names))
	for _, n := range names {
		if n == "*" {
			wildcard = true
			continue
		}
		set[n] = true
	}
	if len(names) == 0 && (first || ts.wildcard) {
		wildcard = true
	}
	changed := wildcard != ts.wildcard || len(set) != len(ts.names)
	if !changed {
		for n := range set {
			if !ts.names[n] {
				changed = true
				break
			}
		}
	}
	ts.wildcard, ts.names = wildcard, set
	return changed
}

func (c *conn) pushAll(stream sotwStream, st *pushctx.State) error {
	for _, typeURL := range typeOrder(c) {
		if err := c.push(stream, st, typeURL, false); err != nil {
			return err
		}
	}
	return nil
}

func typeOrder(c *conn) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, t := range []string{clusterType, endpointType, listenerType, routeType} {
		if ts := c.types[t]; ts != nil && ts.requested {
			out = append(out, t)
		}
	}
	return out
}

// push sends typeURL's subscribed resources if their content differs from
// what was last sent, or if the proxy's request must be answered (force).
func (c *conn) push(stream sotwStream, st *pushctx.State, typeURL string, force bool) error {
	if st == nil {
		return nil // the mesh is not ready; the request is answered once it is
	}
	res := c.resources(st)
	all := res.Resources[typeURL]
	c.mu.Lock()
	ts := c.types[typeURL]
	var picked []*pushctx.Prepared
	var hashes map[string]string
	var version string
	if ts.wildcard || coversAll(ts.names, all) {
		// The whole set, sorted and versioned once for every stream that
		// shares this result (read-only).
		set := res.Set(typeURL)
		picked, hashes, version = set.Sorted, set.Hashes, set.Version
	} else {
		for n := range ts.names {
			if p, ok := all[n]; ok {
				picked = append(picked, p)
			}
		}
		sort.Slice(picked, func(i, j int) bool { return picked[i].Name < picked[j].Name })
		hashes = make(map[string]string, len(picked))
		for _, p := range picked {
			hashes[p.Name] = p.Hash
		}
		version = pushctx.SetVersion(hashes)
	}
	if !force && ts.sentHashes != nil && version == ts.sentVersion {
		c.mu.Unlock()
		return nil
	}
	// Endpoints and routes are not root types: a proxy keeps those a
	// response leaves out (Envoy's xDS protocol, "Resource types"; grpc-go
	// likewise), so an update carries only what changed. A proxy's own
	// request is answered in full.
	if !force && ts.sentHashes != nil && !rootType(typeURL) {
		changed := picked[:0:0]
		for _, p := range picked {
			if ts.sentHashes[p.Name] != p.Hash {
				changed = append(changed, p)
			}
		}
		picked = changed
	}
	c.nonce++
	nonce := strconv.FormatUint(c.nonce, 10)
	resources := make([]*anypb.Any, len(picked))
	size := 0
	for i, p := range picked {
		resources[i] = p.Any
		size += len(p.Any.Value)
	}
	ts.nonce, ts.sentVersion, ts.sentHashes, ts.sentAt = nonce, version, hashes, time.Now()
	ts.changedAt = time.Time{}
	if !force {
		ts.changedAt = st.ChangedAt
	}
	c.mu.Unlock()

	resp := &discoveryv3.DiscoveryResponse{VersionInfo: version, Resources: resources, TypeUrl: typeURL, Nonce: nonce}
	if err := stream.Send(resp); err != nil {
		return err
	}
	short := shortType(typeURL)
	c.server.metrics.pushes.WithLabelValues(short, trigger(st, force)).Inc()
	c.server.metrics.bytes.WithLabelValues(short).Add(float64(size))
	c.server.log.Debug("pushed", "conn", c.id, "type", short, "version", version, "resources", len(picked), "mesh_version", st.Version)
	return nil
}

// rootType reports whether a state-of-the-world response of typeURL is
// the complete set (listeners, clusters): what it leaves out is removed.
func rootType(typeURL string) bool { return typeURL == listenerType || typeURL == clusterType }

// coversAll reports whether names subscribe to every resource of all
// (an Envoy asking for every EDS cluster, say).
func coversAll(names map[string]bool, all map[string]*pushctx.Prepared) bool {
	if len(names) < len(all) || len(all) == 0 {
		return false
	}
	for n := range all {
		if !names[n] {
			return false
		}
	}
	return true
}

// resources returns what st holds for this proxy: the mesh-wide proxyless
// resources (with the server listeners of its own ports), or the Envoy
// resources generated for its key.
func (c *conn) resources(st *pushctx.State) *pushctx.ProxyResources {
	if c.proxy.Type == proxy.GRPC {
		return st.ProxylessFor(c.key)
	}
	return st.ForProxy(c.key)
}

func (c *conn) status() ConnStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := ConnStatus{ID: c.id, NodeID: c.nodeID, Mesh: c.mesh, ProxyType: string(c.proxy.Type), Delta: c.delta, Namespace: c.proxy.Namespace, Peer: c.peer, ConnectedAt: c.connectedAt, Types: map[string]TypeStatus{}}
	for t, ts := range c.types {
		cs.Types[shortType(t)] = TypeStatus{
			Wildcard: ts.wildcard, Subscribed: len(ts.names),
			SentVersion: ts.sentVersion, SentResources: len(ts.sentHashes), SentAt: ts.sentAt,
			AckedVersion: ts.acked, NackedVersion: ts.nacked, NackReason: ts.nackReason,
			Pending: ts.sentVersion != "" && ts.acked != ts.sentVersion && ts.nacked != ts.sentVersion,
		}
	}
	return cs
}
