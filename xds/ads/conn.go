package ads

import (
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/resource"
)

// sotwStream and deltaStream send responses (through a sender). Send
// returns what frees the response's send budget once the proxy has it (nil
// when the response took none).
type (
	sotwStream interface {
		Send(*sotwResponse) (release func(), err error)
	}
	deltaStream interface {
		Send(*deltaResponse) (release func(), err error)
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
	// nds marks an agent's name-table stream (Server.accept): it is
	// served typeurl.NameTable only.
	nds bool
	// identity is what the stream authenticated as (zero in plaintext
	// mode); sds its secrets, nil when it is served none.
	identity WorkloadIdentity
	sds      *sdsState
	// publicCred is the credential last minted for the stream without its
	// private key, for ProxyConfig.
	publicCred atomic.Pointer[Credential]
	// pushed is the version of the push context last pushed (or first
	// served); see Server.pendingPushes.
	pushed atomic.Uint64
	// closed is closed by close (CloseMesh), once, after closeReason is
	// set; the stream then ends.
	closed      chan struct{}
	closeOnce   sync.Once
	closeReason string

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

	// synced is the result (resource.ProxyResources.ID) whose resources of
	// this type the proxy holds exactly, as far as it subscribes (wildcard,
	// or covered: subscribed to every one of them), 0 if none; the next
	// push can then send just what changed since (ChangesSince) instead
	// of comparing every resource. Any subscription change resets it.
	synced  uint64
	covered bool
	// sub is the SotW subscription as last received, shared with the
	// streams that sent the same list (read-only); names is then sub.set.
	sub *nameSet
	// release frees the send budget of the last response once the proxy
	// answers it (see conn.hold); answeredNonce is the last nonce answered.
	release       func()
	answeredNonce string
	// sharedHashes says sentHashes is a resource.Set's map, shared and
	// read-only (delta: the proxy holds exactly that set).
	sharedHashes bool
}

// pendingResponse is a delta response not yet ACKed.
type pendingResponse struct {
	version   string
	changedAt time.Time
}

// trigger names why a response is sent (metric label).
func trigger(st resource.State, request bool) string {
	switch {
	case request:
		return "request"
	case st.ConfigChanged():
		return "config"
	}
	return "endpoints"
}

// hold keeps a sent response's send budget until the proxy answers it: a
// gRPC send returns once the response is queued, not written, so only the
// proxy's ACK or NACK says the bytes have left the hub. A proxy that does
// not answer within the send timeout, or whose stream ends, frees it too;
// a newer response of the type frees the older one (gRPC queued it only
// once the older one was written).
func (c *conn) hold(ts *typeState, nonce string, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts.release != nil {
		ts.release()
		ts.release = nil
	}
	if release == nil {
		return // a small response: nothing held
	}
	if ts.answeredNonce == nonce {
		release() // answered before the send returned
		return
	}
	var once sync.Once
	// The timer may fire before AfterFunc returns: it is published
	// atomically (nil then: nothing left to stop).
	var timer atomic.Pointer[time.Timer]
	free := func() {
		once.Do(func() {
			if t := timer.Load(); t != nil {
				t.Stop()
			}
			release()
		})
	}
	timer.Store(time.AfterFunc(c.server.opts.SendTimeout, free))
	ts.release = free
}

// answered frees what hold kept for ts (c.mu held).
func (c *conn) answered(ts *typeState) {
	if ts.release != nil {
		ts.release()
		ts.release = nil
	}
}

// answer frees the send budget of typeURL's last response if the request
// answers it (nonce); called by the stream's receiving goroutine.
func (c *conn) answer(typeURL, nonce string) {
	if nonce == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts := c.types[typeURL]; ts != nil && ts.nonce == nonce {
		ts.answeredNonce = nonce
		c.answered(ts)
	}
}

// releaseAll frees every held send budget (the stream ended).
func (c *conn) releaseAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ts := range c.types {
		c.answered(ts)
	}
}

// pushedState records that st was pushed to the stream.
func (c *conn) pushedState(st resource.State) {
	if st != nil {
		c.pushed.Store(st.Version())
	}
}

// converged observes how long a change took to be ACKed by the proxy.
func (c *conn) converged(typeURL string, changedAt time.Time) {
	if !changedAt.IsZero() {
		c.server.metrics.convergence.WithLabelValues(typeurl.Short(typeURL)).Observe(time.Since(changedAt).Seconds())
	}
}

func (c *conn) handle(stream sotwStream, st resource.State, req *discoveryv3.DiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	if typeURL == typeurl.Secret && !c.nds {
		return c.handleSecrets(stream, req)
	}
	if !c.serves(typeURL) {
		c.server.log.Debug("request for a type this hub does not serve on this stream", "conn", c.id, "type", typeURL)
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
		c.answered(ts)
		if e := req.GetErrorDetail(); e != nil {
			ts.nacked, ts.nackReason = ts.sentVersion, e.GetMessage()
			c.server.metrics.nacks.WithLabelValues(typeurl.Short(typeURL)).Inc()
			c.server.log.Warn("proxy rejected config", "conn", c.id, "type", typeurl.Short(typeURL), "version", ts.sentVersion, "reason", e.GetMessage())
		} else {
			ts.acked = req.GetVersionInfo()
			ts.nacked, ts.nackReason = "", ""
			c.converged(typeURL, ts.changedAt)
			ts.changedAt = time.Time{}
		}
	}
	first := !ts.requested
	ts.requested = true
	changed := ts.subscribe(sharedNames, req.GetResourceNames(), first)
	if changed {
		ts.synced = 0
	}
	c.mu.Unlock()
	if first || changed {
		return c.push(stream, st, typeURL, true)
	}
	return nil
}

// subscribe updates the SotW subscription and reports whether it
// changed. An empty first request for a type names the legacy wildcard.
// ts.names becomes a set shared with other streams (sets): never changed
// in place on this path.
func (ts *typeState) subscribe(sets *nameSets, names []string, first bool) bool {
	// An ACK usually repeats the request's list as it was (an Envoy
	// sidecar names every EDS cluster in each): nothing to look up then.
	if !first && ts.sub != nil && slices.Equal(names, ts.sub.list) {
		return false
	}
	sub := sets.get(names)
	wildcard := sub.wildcard || len(names) == 0 && (first || ts.wildcard)
	changed := wildcard != ts.wildcard || len(sub.set) != len(ts.names)
	if !changed {
		for n := range sub.set {
			if !ts.names[n] {
				changed = true
				break
			}
		}
	}
	ts.sub, ts.wildcard, ts.names = sub, wildcard, sub.set
	return changed
}

func (c *conn) pushAll(stream sotwStream, st resource.State) error {
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
	for _, t := range []string{typeurl.Cluster, typeurl.Endpoint, typeurl.Listener, typeurl.Route, typeurl.NameTable} {
		if ts := c.types[t]; ts != nil && ts.requested {
			out = append(out, t)
		}
	}
	return out
}

// push sends typeURL's subscribed resources if their content differs from
// what was last sent, or if the proxy's request must be answered (force).
func (c *conn) push(stream sotwStream, st resource.State, typeURL string, force bool) error {
	if st == nil {
		return nil // the mesh is not ready; the request is answered once it is
	}
	res := c.resourcesOf(st, typeURL)
	all := res.Resources[typeURL]
	c.mu.Lock()
	ts := c.types[typeURL]
	var picked []*resource.Prepared
	var hashes map[string]string
	var version string
	if ch, ok := c.sotwChanges(ts, res, typeURL, force); ok {
		// The proxy holds what the result was derived from: send what
		// changed (the whole set, for a root type), nothing if nothing did.
		if ch.Empty() {
			ts.synced = res.ID()
			c.mu.Unlock()
			return nil
		}
		set := res.Set(typeURL)
		picked, hashes, version = ch.Updated, set.Hashes, set.Version
		if rootType(typeURL) {
			picked = set.Sorted
		}
	} else {
		ts.covered = ts.wildcard || coversAll(ts.names, all)
		if ts.covered {
			// The whole set, sorted and versioned once for every stream
			// that shares this result (read-only).
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
			version = resource.SetVersion(hashes)
		}
		if !force && ts.sentHashes != nil && version == ts.sentVersion {
			ts.synced = syncedTo(ts, res)
			c.mu.Unlock()
			return nil
		}
		// Endpoints and routes are not root types: a proxy keeps those a
		// response leaves out (Envoy's xDS protocol, "Resource types";
		// grpc-go likewise), so an update carries only what changed. A
		// proxy's own request is answered in full.
		if !force && ts.sentHashes != nil && !rootType(typeURL) {
			changed := picked[:0:0]
			for _, p := range picked {
				if ts.sentHashes[p.Name] != p.Hash {
					changed = append(changed, p)
				}
			}
			picked = changed
		}
	}
	ts.synced = syncedTo(ts, res)
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
		ts.changedAt = st.ChangedAt()
	}
	c.mu.Unlock()

	resp := &sotwResponse{&discoveryv3.DiscoveryResponse{VersionInfo: version, Resources: resources, TypeUrl: typeURL, Nonce: nonce}, picked}
	release, err := stream.Send(resp)
	if err != nil {
		return err
	}
	c.hold(ts, nonce, release)
	short := typeurl.Short(typeURL)
	c.server.metrics.pushes.WithLabelValues(short, trigger(st, force)).Inc()
	c.server.metrics.bytes.WithLabelValues(short).Add(float64(size))
	c.server.log.Debug("pushed", "conn", c.id, "type", short, "version", version, "resources", len(picked), "mesh_version", st.Version())
	return nil
}

// sotwChanges returns what changed for typeURL since the result the proxy
// holds, when the proxy holds one (see typeState.synced) and its
// subscription still covers everything: a push then costs what changed,
// not what the proxy holds. A request (force) is answered in full.
func (c *conn) sotwChanges(ts *typeState, res *resource.ProxyResources, typeURL string, force bool) (*resource.Changes, bool) {
	if force || ts.sentHashes == nil || !ts.covered {
		return nil, false
	}
	ch, ok := res.ChangesSince(ts.synced, typeURL)
	if !ok && ts.synced != 0 {
		// Covered, so the proxy holds all of that result's set, whose
		// (shared) map sentHashes is: the difference is computed once for
		// every stream that holds it.
		ch, ok = res.ChangesFrom(ts.synced, typeURL, ts.sentHashes), true
	}
	if !ok {
		return nil, false
	}
	if !ts.wildcard {
		for _, p := range ch.Updated {
			if !ts.names[p.Name] {
				return nil, false // a new resource the proxy does not subscribe to
			}
		}
	}
	return ch, true
}

// syncedTo is what typeState.synced becomes once the proxy holds what the
// push sends of res.
func syncedTo(ts *typeState, res *resource.ProxyResources) uint64 {
	if ts.covered {
		return res.ID()
	}
	return 0
}

// rootType reports whether a state-of-the-world response of typeURL is
// the complete set (listeners, clusters): what it leaves out is removed.
func rootType(typeURL string) bool { return typeURL == typeurl.Listener || typeURL == typeurl.Cluster }

// coversAll reports whether names subscribe to every resource of all
// (an Envoy asking for every EDS cluster, say).
func coversAll(names map[string]bool, all map[string]*resource.Prepared) bool {
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

// serves reports whether the stream is served typeURL: a name-table
// stream only the name table; any other stream every type the server
// generates (Istio's agent asks for the name table on its Envoy's
// stream).
func (c *conn) serves(typeURL string) bool {
	if c.nds {
		return typeURL == typeurl.NameTable
	}
	return knownType(typeURL)
}

// resourcesOf returns what st holds of typeURL for this proxy (see
// resources).
func (c *conn) resourcesOf(st resource.State, typeURL string) *resource.ProxyResources {
	if typeURL == typeurl.NameTable {
		return st.NameTableFor(c.key)
	}
	return c.resources(st)
}

// resources returns what st holds for this proxy: its name table for a
// name-table stream, the mesh-wide proxyless resources (with the server
// listeners of its own ports), or the Envoy resources generated for its
// key.
func (c *conn) resources(st resource.State) *resource.ProxyResources {
	if c.nds {
		return st.NameTableFor(c.key)
	}
	if c.proxy.Type == proxy.GRPC {
		return st.ProxylessFor(c.key)
	}
	return st.ForProxy(c.key)
}

func (c *conn) status() ConnStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := ConnStatus{ID: c.id, NodeID: c.nodeID, Mesh: c.mesh, ProxyType: string(c.proxy.Type), Delta: c.delta, NameTable: c.nds, Namespace: c.proxy.Namespace, Peer: c.peer, ConnectedAt: c.connectedAt, Types: map[string]TypeStatus{}}
	for t, ts := range c.types {
		cs.Types[typeurl.Short(t)] = TypeStatus{
			Wildcard: ts.wildcard, Subscribed: len(ts.names),
			SentVersion: ts.sentVersion, SentResources: len(ts.sentHashes), SentAt: ts.sentAt,
			AckedVersion: ts.acked, NackedVersion: ts.nacked, NackReason: ts.nackReason,
			Pending: ts.sentVersion != "" && ts.acked != ts.sentVersion && ts.nacked != ts.sentVersion,
		}
	}
	return cs
}
