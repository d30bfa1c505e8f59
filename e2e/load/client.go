package load

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/shared/typeurl"
)

// Type indices.
const (
	typeCDS = iota
	typeEDS
	typeLDS
	typeRDS
	numTypes
)

var typeURLs = [numTypes]string{typeurl.Cluster, typeurl.Endpoint, typeurl.Listener, typeurl.Route}

// TypeNames are the short names of the types, by index.
var TypeNames = [numTypes]string{"CDS", "EDS", "LDS", "RDS"}

func typeIndex(url string) int {
	for i, u := range typeURLs {
		if u == url {
			return i
		}
	}
	return -1
}

// env is what the clients of one run share.
type env struct {
	epoch   time.Time
	names   *names
	deriver *deriver
	// watched are the resources whose content changes the clients report
	// (the fan-out scenario's cluster). Set before any client starts.
	watched map[int32]bool
	markers *markers
}

func newEnv() *env {
	n := newNames()
	return &env{epoch: time.Now(), names: n, deriver: newDeriver(n), watched: map[int32]bool{}, markers: newMarkers()}
}

func (e *env) since(t time.Time) int64 { return int64(t.Sub(e.epoch)) }

// Event is one response a client received.
type Event struct {
	At        int64 // nanoseconds since the run's epoch
	Type      int8
	Resources int32
	Removed   int32 // delta removed_resources, or root resources a state-of-the-world response left out
	Bytes     int32 // the whole response message
	Markers   int16 // endpoint moves seen first in this response
}

// typeState is what a client holds and asks for of one type.
type typeState struct {
	requested bool // subscribed (a request was sent)
	wildcard  bool
	want      bitset // named subscription
	wantNames []string
	wantWire  []byte // wantNames encoded (sotwRequest.names)
	have      bitset
	absent    bitset // delta: subscribed names the server says do not exist
	// answered: a response arrived since names were last added.
	answered       bool
	version, nonce string // state of the world
	// deps are, per held resource, the names it makes the client ask for
	// on the dependent type.
	deps map[int32][]int32
}

// watch is what a client saw of a watched resource.
type watch struct {
	hash    uint64
	changes int
	recvAt  time.Time // the last change arrived
	ackAt   time.Time // and was ACKed
}

// observation is a client's first sight of an endpoint move.
type observation struct {
	seq           int32
	recvAt, ackAt time.Time
}

// Client is one simulated proxy on one ADS stream. It subscribes like the
// real thing, ACKs every response once processed, and records every
// response (Event) and when it first held everything it asked for.
type Client struct {
	Spec  ProxySpec
	env   *env
	delta bool
	// replica is the index of the hub (replica) it connects to.
	replica int

	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}
	sendMu sync.Mutex
	queue  []any // *sotwRequest or a proto.Message
	wake   chan struct{}
	sent   bool // the node went out (first request)

	mu         sync.Mutex
	ts         [numTypes]typeState
	events     []Event
	completeAt time.Time
	watch      map[int32]*watch
	seen       bitset // endpoint moves seen, by sequence number
	observed   []observation
	err        error
	closed     atomic.Bool
}

// envoyWindow is the HTTP/2 flow-control window Envoy advertises on its
// connections by default (initial_stream_window_size and
// initial_connection_window_size, 256 MiB): a simulated proxy receives as
// an Envoy would, rather than with grpc-go's 64 KiB window grown by
// bandwidth-delay pings, which makes the hub wait for window updates
// from clients that share its cores.
const envoyWindow = 256 << 20

func newClient(e *env, spec ProxySpec, delta bool, target string) (*Client, error) {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)),
		grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow))
	if err != nil {
		return nil, err
	}
	c := &Client{Spec: spec, env: e, delta: delta, conn: conn, done: make(chan struct{}), wake: make(chan struct{}, 1), watch: map[int32]*watch{}}
	for t := range c.ts {
		c.ts[t].deps = map[int32][]int32{}
	}
	return c, nil
}

// start opens the stream and sends the first requests; the client then
// runs on its own goroutines until ctx ends or the stream fails.
func (c *Client) start(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn)
	var stream grpc.ClientStream
	var err error
	if c.delta {
		stream, err = ads.DeltaAggregatedResources(ctx, grpc.ForceCodecV2(rawCodec{}))
	} else {
		stream, err = ads.StreamAggregatedResources(ctx, grpc.ForceCodecV2(rawCodec{}))
	}
	if err != nil {
		c.fail(err)
		close(c.done)
		return
	}
	c.mu.Lock()
	if c.Spec.Kind == Proxyless {
		lds := &c.ts[typeLDS]
		for _, n := range c.Spec.Listeners {
			lds.want.set(c.env.names.idString(n))
		}
		c.subscribe(typeLDS, lds.want, nil)
	} else {
		for _, t := range []int{typeCDS, typeLDS} {
			c.ts[t].wildcard, c.ts[t].requested = true, true
			if c.delta {
				c.enqueue(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURLs[t]})
			} else {
				c.enqueue(&discoveryv3.DiscoveryRequest{TypeUrl: typeURLs[t]})
			}
		}
	}
	c.mu.Unlock()
	go c.sendLoop(ctx, stream)
	go func() {
		defer close(c.done)
		var msg rawMessage
		var resp rawResponse
		for {
			err := stream.RecvMsg(&msg)
			at := time.Now()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, io.EOF) && status.Code(err) != codes.Canceled {
					c.fail(err)
				} else if ctx.Err() == nil {
					c.fail(errors.New("the hub ended the stream"))
				}
				return
			}
			err = parseResponse(msg.bytes(), c.delta, &resp)
			if err == nil {
				c.handle(&resp, at)
			}
			msg.free()
			if err != nil {
				c.fail(err)
				return
			}
		}
	}()
}

// enqueue queues a request; the send loop sends them in order, so the
// receive loop never blocks on flow control. Called with c.mu held.
func (c *Client) enqueue(m any) {
	c.sendMu.Lock()
	if !c.sent {
		c.sent = true
		switch r := m.(type) {
		case *discoveryv3.DiscoveryRequest:
			r.Node = c.Spec.Node
		case *sotwRequest:
			r.node = c.Spec.Node
		case *discoveryv3.DeltaDiscoveryRequest:
			r.Node = c.Spec.Node
		}
	}
	c.queue = append(c.queue, m)
	c.sendMu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Client) sendLoop(ctx context.Context, stream grpc.ClientStream) {
	for {
		c.sendMu.Lock()
		q := c.queue
		c.queue = nil
		c.sendMu.Unlock()
		for _, m := range q {
			if err := stream.SendMsg(m); err != nil {
				if ctx.Err() == nil {
					c.fail(err)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
	}
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil && !c.closed.Load() {
		c.err = err
	}
	c.mu.Unlock()
}

// Err is the stream's failure, if it failed.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// close ends the stream and the connection.
func (c *Client) close() {
	c.closed.Store(true)
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	c.conn.Close()
}

// dependent is the type whose subscription t's resources decide, or -1.
func (c *Client) dependent(t int) int {
	switch t {
	case typeCDS:
		return typeEDS
	case typeLDS:
		return typeRDS
	case typeRDS:
		if !c.ts[typeCDS].wildcard {
			return typeCDS // proxyless: the clusters its routes name
		}
	}
	return -1
}

// resource processes one received resource of type t: what it makes the
// client subscribe to, a watched resource's change, and (EDS) the endpoint
// moves it is the first to carry, appended to obs.
func (c *Client) resource(t int, id int32, b []byte, at time.Time, obs *[]int32) {
	ts := &c.ts[t]
	if c.dependent(t) >= 0 {
		ts.deps[id] = c.env.deriver.derive(t, b)
	}
	if c.env.watched[id] {
		c.sawWatched(id, c.env.deriver.hash(b), at)
	}
	if t == typeEDS && c.env.markers.any() {
		for _, m := range c.env.markers.forName(id) {
			if !c.seen.has(m.seq) && bytes.Contains(b, m.needle) {
				c.seen.set(m.seq)
				*obs = append(*obs, m.seq)
			}
		}
	}
}

func (c *Client) sawWatched(id int32, h uint64, at time.Time) {
	w := c.watch[id]
	if w == nil {
		w = &watch{}
		c.watch[id] = w
	}
	if w.hash != h {
		if w.hash != 0 || h == 0 {
			w.changes++
			w.recvAt, w.ackAt = at, time.Time{}
		}
		w.hash = h
	}
}

// handle processes one response and queues its ACK.
func (c *Client) handle(r *rawResponse, at time.Time) {
	t := typeIndex(r.typeURL)
	c.mu.Lock()
	defer c.mu.Unlock()
	if t < 0 {
		if c.delta {
			c.enqueue(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.typeURL, ResponseNonce: r.nonce})
		} else {
			c.enqueue(&discoveryv3.DiscoveryRequest{TypeUrl: r.typeURL, VersionInfo: r.version, ResponseNonce: r.nonce})
		}
		return
	}
	ev := Event{At: c.env.since(at), Type: int8(t), Resources: int32(len(r.resources)), Bytes: int32(r.size)}
	var obs []int32
	if c.delta {
		ev.Removed = int32(len(r.removed))
		c.applyDelta(t, r, at, &obs)
	} else {
		ev.Removed = int32(c.applySotW(t, r, at, &obs))
	}
	c.processed(t, ev, obs, at)
}

// applySotW applies a state-of-the-world response and queues its ACK. It
// returns how many resources a root type's response left out.
func (c *Client) applySotW(t int, r *rawResponse, at time.Time, obs *[]int32) int {
	ts := &c.ts[t]
	root := t == typeCDS || t == typeLDS
	var have bitset
	if root {
		ts.deps = make(map[int32][]int32, len(ts.deps))
	}
	for _, res := range r.resources {
		id := c.env.names.id(resourceName(res.value))
		if root {
			have.set(id)
		} else {
			ts.have.set(id)
		}
		c.resource(t, id, res.value, at, obs)
	}
	removed := 0
	if root {
		removed = ts.have.minus(have)
		for id := range c.watch {
			if ts.have.has(id) && !have.has(id) {
				c.sawWatched(id, 0, at)
			}
		}
		ts.have = have
	}
	ts.version, ts.nonce, ts.answered = r.version, r.nonce, true
	c.enqueue(c.sotwRequest(t))
	return removed
}

// applyDelta applies a delta response and queues its ACK.
func (c *Client) applyDelta(t int, r *rawResponse, at time.Time, obs *[]int32) {
	ts := &c.ts[t]
	for _, res := range r.resources {
		id := c.env.names.id(res.name)
		ts.have.set(id)
		ts.absent.clear(id)
		c.resource(t, id, res.value, at, obs)
	}
	for _, n := range r.removed {
		id := c.env.names.id(n)
		if ts.have.has(id) {
			ts.have.clear(id)
			delete(ts.deps, id)
			if c.env.watched[id] {
				c.sawWatched(id, 0, at)
			}
		} else if ts.want.has(id) {
			ts.absent.set(id)
		}
	}
	ts.answered = true
	c.enqueue(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURLs[t], ResponseNonce: r.nonce})
}

// processed follows a response's ACK: dependent subscriptions, what the
// scenarios observe, completeness. Called with c.mu held.
func (c *Client) processed(t int, ev Event, obs []int32, at time.Time) {
	if d := c.dependent(t); d >= 0 {
		var want bitset
		for _, ids := range c.ts[t].deps {
			for _, id := range ids {
				want.set(id)
			}
		}
		c.subscribe(d, want, c.ts[d].want)
	}
	ackAt := time.Now()
	for _, w := range c.watch {
		if w.recvAt.Equal(at) && w.ackAt.IsZero() {
			w.ackAt = ackAt
		}
	}
	for _, seq := range obs {
		c.observed = append(c.observed, observation{seq: seq, recvAt: at, ackAt: ackAt})
	}
	ev.Markers = int16(min(len(obs), 1<<15-1))
	c.events = append(c.events, ev)
	if c.completeAt.IsZero() && c.complete() {
		c.completeAt = ackAt
	}
}

// subscribe sets type t's named subscription to want (old is the previous
// one) and tells the server if it changed. Called with c.mu held.
func (c *Client) subscribe(t int, want, old bitset) {
	ts := &c.ts[t]
	if ts.wildcard || (ts.requested && want.equal(old)) || (!ts.requested && want.count() == 0) {
		return
	}
	if want.minus(old) > 0 {
		ts.answered = false
	}
	first := !ts.requested
	ts.requested = true
	ts.want, ts.wantNames, ts.wantWire = want, nil, nil
	ts.have.intersect(want)
	ts.absent.intersect(want)
	for id := range ts.deps {
		if !want.has(id) {
			delete(ts.deps, id)
		}
	}
	if !c.delta {
		c.enqueue(c.sotwRequest(t))
		return
	}
	r := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURLs[t]}
	want.each(func(id int32) {
		if first || !old.has(id) {
			r.ResourceNamesSubscribe = append(r.ResourceNamesSubscribe, c.env.names.name(id))
		}
	})
	old.each(func(id int32) {
		if !want.has(id) {
			r.ResourceNamesUnsubscribe = append(r.ResourceNamesUnsubscribe, c.env.names.name(id))
		}
	})
	c.enqueue(r)
}

// names is type t's subscription as a state-of-the-world request names it
// (nil for the wildcard).
func (c *Client) names(t int) []string {
	ts := &c.ts[t]
	if ts.wildcard {
		return nil
	}
	if ts.wantNames == nil {
		ts.wantNames = make([]string, 0, ts.want.count())
		ts.want.each(func(id int32) { ts.wantNames = append(ts.wantNames, c.env.names.name(id)) })
	}
	return ts.wantNames
}

// sotwRequest is type t's state-of-the-world request: its version and
// nonce, and its subscription's names, encoded once per subscription.
func (c *Client) sotwRequest(t int) *sotwRequest {
	ts := &c.ts[t]
	if ts.wantWire == nil && !ts.wildcard {
		ts.wantWire = appendNames([]byte{}, c.names(t))
	}
	return &sotwRequest{typeURL: typeURLs[t], version: ts.version, nonce: ts.nonce, names: ts.wantWire}
}

// complete reports whether every subscribed type has been answered and
// every named resource asked for is held (or known not to exist).
func (c *Client) complete() bool {
	for t := range c.ts {
		ts := &c.ts[t]
		if !ts.requested {
			continue
		}
		if !ts.answered || (!ts.wildcard && !ts.want.subsetOf(ts.have, ts.absent)) {
			return false
		}
	}
	return true
}

// CompleteAt is when the client first held everything it asked for (zero
// if not yet).
func (c *Client) CompleteAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.completeAt
}

// Complete reports whether the client currently holds everything it asks for.
func (c *Client) Complete() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.complete()
}

// Events returns the responses received so far.
func (c *Client) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events...)
}

// holds reports how many resources of each type the client holds.
func (c *Client) holds() [numTypes]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [numTypes]int
	for t := range c.ts {
		out[t] = c.ts[t].have.count()
	}
	return out
}

// subscribed reports whether the client asks for the EDS resource id.
func (c *Client) subscribed(t int, id int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := &c.ts[t]
	return ts.requested && (ts.wildcard || ts.want.has(id))
}

// watchState returns what the client saw of a watched resource.
func (c *Client) watchState(id int32) watch {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.watch[id]; w != nil {
		return *w
	}
	return watch{}
}

// markers are the endpoint moves the clients look for in EDS responses.
type markers struct {
	mu     sync.RWMutex
	active map[int32][]*marker // by EDS resource name id
	n      atomic.Int32
}

type marker struct {
	seq int32
	// needle is the address as protobuf encodes SocketAddress.address
	// (field 2, length-prefixed): found in a ClusterLoadAssignment's bytes
	// only where an endpoint has that address (addresses are unique per
	// run, and "10.64.0.1" never matches inside "10.64.0.10").
	needle []byte
	at     time.Time // when the move was handed to the spoke
}

func newMarkers() *markers { return &markers{active: map[int32][]*marker{}} }

func (m *markers) any() bool { return m.n.Load() > 0 }

func (m *markers) forName(id int32) []*marker {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.active[id]
}

func (m *markers) add(id int32, mk *marker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active[id] = append(m.active[id], mk)
	m.n.Add(1)
}

func (m *markers) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active = map[int32][]*marker{}
	m.n.Store(0)
}

func needle(address string) []byte {
	return append([]byte{2<<3 | 2, byte(len(address))}, address...)
}
