// Package ads serves the Aggregated Discovery Service, state of the world
// and incremental (delta), to proxies. Each stream follows its mesh's published push context
// (a resource.State, from the cache) and sends a type only when what the proxy subscribed to
// changed in content; a NACKed version is never re-sent, and the last good
// config stays with the proxy.
package ads

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/grpcpeer"
	"github.com/navemesh/nave/shared/meshlimits"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/resource"
)

// Options configure a Server.
type Options struct {
	// DefaultMesh is the mesh of a proxy whose node metadata names none.
	DefaultMesh string
	// SendTimeout bounds how long one response may wait for the proxy to
	// read it (gRPC flow control); a proxy that stops reading is
	// disconnected with a logged reason instead of holding memory. Zero
	// means 30 s.
	SendTimeout time.Duration
	// AdmissionRate bounds how many new streams per second get their first
	// config (a connection storm is served in arrival order at this rate,
	// not all at once); AdmissionBurst is how many may start at once. Zero
	// rate means unlimited.
	AdmissionRate  float64
	AdmissionBurst int
	// MaxInflightBytes bounds the bytes of responses of 64 KiB or more
	// being sent at once across all streams (gRPC holds a marshalled copy
	// of each until it is written); a large response waits for room. Zero
	// means 64 MiB; negative means unbounded.
	MaxInflightBytes int64
	// Hosted reports whether the hub serves a mesh now: a proxy of any
	// other is refused, whatever decided its mesh, and a stream accepted
	// while its mesh was served is closed by CloseMesh when it stops
	// being. Nil serves every mesh. It is called on every new stream.
	Hosted func(mesh string) bool
	// HostedNames lists the meshes served, for the refusal's message; nil
	// leaves the list out.
	HostedNames func() []string
	// Authenticator proves each stream's identity (its mesh, namespace and
	// service account); nil trusts the node's metadata, for plaintext mode
	// (the mesh is then the node's MESH, else DefaultMesh).
	Authenticator Authenticator
	// Secrets mints the workload certificates served by SDS ("default",
	// "ROOTCA") to authenticated streams; nil serves no secrets.
	Secrets SecretSource
	// MaxProxies bounds each mesh's streams on this server (its limit
	// proxies): a stream beyond it is refused with RESOURCE_EXHAUSTED
	// naming the limit. nil, or 0 for a mesh, is unbounded.
	MaxProxies func(mesh string) int
	// LimitMetrics counts the refusals and the streams per mesh
	// (shared/meshlimits); nil counts nowhere.
	LimitMetrics *meshlimits.Metrics
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
}

// Server implements discoveryv3.AggregatedDiscoveryServiceServer. Safe for
// concurrent use; every stream runs on its own goroutines, so one slow
// proxy never delays another.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	src     resource.Source
	opts    Options
	log     *slog.Logger
	metrics *metrics
	// authRefusals counts streams refused by identify.
	authRefusals *prometheus.CounterVec
	nextID       atomic.Uint64

	admission *rate.Limiter // nil: unlimited
	// budget holds Options.MaxInflightBytes (nil: unbounded); inflight is
	// how much of it is taken.
	budget   *semaphore.Weighted
	inflight atomic.Int64
	waiting  atomic.Int64 // streams waiting for admission

	mu    sync.Mutex
	conns map[string]*conn
	// perMesh counts conns by mesh, name-table streams (conn.nds) apart
	// in perMeshNDS.
	perMesh    map[string]int
	perMeshNDS map[string]int
}

// New returns a Server serving the push contexts of src.
func New(src resource.Source, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DefaultMesh == "" {
		opts.DefaultMesh = "default"
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = 30 * time.Second
	}
	if opts.MaxInflightBytes == 0 {
		opts.MaxInflightBytes = 64 << 20
	}
	s := &Server{src: src, opts: opts, log: opts.Logger, conns: map[string]*conn{}, perMesh: map[string]int{}, perMeshNDS: map[string]int{}}
	if opts.MaxInflightBytes > 0 {
		s.budget = semaphore.NewWeighted(opts.MaxInflightBytes)
	}
	if opts.AdmissionRate > 0 {
		s.admission = rate.NewLimiter(rate.Limit(opts.AdmissionRate), max(1, opts.AdmissionBurst))
	}
	s.authRefusals = newAuthRefusals(opts.Registerer)
	s.metrics = newMetrics(opts.Registerer, func() float64 { return float64(s.waiting.Load()) }, s.pendingPushes,
		func() float64 { return float64(s.inflight.Load()) })
	return s
}

// admit waits for the stream's turn to be served (see
// Options.AdmissionRate). Waiters are served in arrival order.
func (s *Server) admit(ctx context.Context) error {
	if s.admission == nil {
		return nil
	}
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	start := time.Now()
	if err := s.admission.Wait(ctx); err != nil {
		return status.FromContextError(err).Err()
	}
	s.metrics.admissionWait.Observe(time.Since(start).Seconds())
	return nil
}

// sender sends responses with a deadline: if the proxy does not take a
// response within timeout (it stopped reading and flow control blocks),
// the stream is ended with DeadlineExceeded and a logged reason. The send
// itself runs on its own goroutine, which ends when the stream does.
//
// A response of budgetFloor bytes or more first takes its size from the
// server's budget of bytes being sent (Options.MaxInflightBytes): gRPC
// marshals a copy of every response it sends and keeps it until written,
// so a storm of proxies each receiving megabytes would otherwise hold all
// those copies at once. Send returns the function that gives the budget
// back (nil if it took none), which the stream calls when the proxy
// answers (conn.hold). The
// wait for budget is not part of the deadline.
type sender[Resp proto.Message] struct {
	ctx     context.Context
	send    func(Resp) error
	timeout time.Duration
	onStuck func()
	server  *Server
}

// budgetFloor is the response size from which sends take budget: smaller
// responses (an endpoint update) never wait behind a large one.
const budgetFloor = 64 << 10

func (s sender[Resp]) Send(r Resp) (func(), error) {
	var release func() // nil: the response took no budget
	if size := int64(encodedSize(r)); size >= budgetFloor && s.server.budget != nil {
		size = min(size, s.server.opts.MaxInflightBytes)
		start := time.Now()
		if err := s.server.budget.Acquire(s.ctx, size); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		s.server.metrics.budgetWait.Observe(time.Since(start).Seconds())
		s.server.inflight.Add(size)
		release = func() { s.server.inflight.Add(-size); s.server.budget.Release(size) }
	}
	done := make(chan error, 1)
	go func() { done <- s.send(r) }()
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			if release != nil {
				release()
			}
			return nil, err
		}
		return release, nil
	case <-t.C:
		s.onStuck()
		if release != nil {
			go func() { <-done; release() }()
		}
		return nil, status.Errorf(codes.DeadlineExceeded, "the proxy did not read a response for %s (flow control): disconnected", s.timeout)
	}
}

// MetadataMesh is the node metadata key naming a proxy's mesh.
const MetadataMesh = proxy.MetaMesh

// StreamAggregatedResources serves one proxy over state-of-the-world ADS.
func (s *Server) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	var c *conn
	// SendMsg: Codec writes a *sotwResponse from its prepared encodings.
	send := func(r *sotwResponse) error { return stream.SendMsg(r) }
	out := sender[*sotwResponse]{ctx: stream.Context(), send: send, timeout: s.opts.SendTimeout, onStuck: func() { s.stuck(c) }, server: s}
	return serveStream(s, stream.Context(), stream.Recv, false,
		func(cc *conn, st resource.State, req *discoveryv3.DiscoveryRequest) error {
			c = cc
			return cc.handle(out, st, req)
		},
		func(cc *conn, st resource.State) error { return cc.pushAll(out, st) },
		func(cc *conn) error { return cc.sendSecrets(out, nil, true) })
}

// DeltaAggregatedResources serves one proxy over incremental (delta) ADS.
func (s *Server) DeltaAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	var c *conn
	send := func(r *deltaResponse) error { return stream.SendMsg(r) } // see StreamAggregatedResources
	out := sender[*deltaResponse]{ctx: stream.Context(), send: send, timeout: s.opts.SendTimeout, onStuck: func() { s.stuck(c) }, server: s}
	return serveStream(s, stream.Context(), stream.Recv, true,
		func(cc *conn, st resource.State, req *discoveryv3.DeltaDiscoveryRequest) error {
			c = cc
			return cc.handleDelta(out, st, req)
		},
		func(cc *conn, st resource.State) error { return cc.pushAllDelta(out, st) },
		func(cc *conn) error { return cc.sendSecrets(nil, out, true) })
}

// answer is what both variants' requests say of the response they answer.
type answer interface {
	GetTypeUrl() string
	GetResponseNonce() string
}

// stuck logs and counts a proxy disconnected for not reading.
func (s *Server) stuck(c *conn) {
	s.metrics.stuck.Inc()
	if c != nil {
		s.log.Warn("proxy stopped reading; disconnecting it", "conn", c.id, "mesh", c.mesh, "timeout", s.opts.SendTimeout)
	}
}

// serveStream runs one ADS stream of either variant: requests are read on
// their own goroutine, the first one's node is accepted, and each new push
// context of the proxy's mesh is pushed with pushAll.
func serveStream[Req interface{ GetNode() *corev3.Node }](s *Server, ctx context.Context, recv func() (Req, error), delta bool,
	handle func(*conn, resource.State, Req) error, pushAll func(*conn, resource.State) error, renewSecrets func(*conn) error) error {
	reqs := make(chan Req)
	recvErr := make(chan error, 1)
	// The receiving goroutine frees the send budget a request answers
	// (conn.hold) itself: the stream's own goroutine may be waiting for
	// budget, and must not be what an ACK waits for.
	var accepted atomic.Pointer[conn]
	go func() {
		for {
			r, err := recv()
			if err != nil {
				recvErr <- err
				return
			}
			if c := accepted.Load(); c != nil {
				if a, ok := any(r).(answer); ok {
					c.answer(a.GetTypeUrl(), a.GetResponseNonce())
				}
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()

	var c *conn
	var state resource.State
	var changed <-chan struct{}
	defer func() {
		if c != nil {
			s.remove(c)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case req := <-reqs:
			if c == nil {
				var err error
				t, _ := any(req).(interface{ GetTypeUrl() string })
				if c, err = s.accept(ctx, req.GetNode(), delta, t != nil && t.GetTypeUrl() == typeurl.NameTable); err != nil {
					return err
				}
				accepted.Store(c)
				defer s.src.Watch(c.mesh)()
				if err := s.admit(ctx); err != nil {
					return err
				}
				state, changed = s.src.Current(c.mesh)
				c.pushedState(state)
			}
			if err := handle(c, state, req); err != nil {
				return err
			}
		case <-c.closing():
			return c.closedErr()
		case <-c.secretsDue():
			// The stream's SDS certificate is due: mint and send a new one.
			if err := renewSecrets(c); err != nil {
				return err
			}
		case <-changed:
			// Every change published since the last push is merged into
			// this one: the stream always pushes the newest push context.
			state, changed = s.src.Current(c.mesh)
			start := time.Now()
			if err := pushAll(c, state); err != nil {
				return err
			}
			s.metrics.pushSeconds.Observe(time.Since(start).Seconds())
			c.pushedState(state)
		}
	}
}

// accept admits a stream. nds marks an agent's name-table stream (its
// first request asks for typeurl.NameTable): it is served the name table
// only, and is not one of the mesh's proxies — its pod's Envoy is — but
// the mesh's name-table streams are bounded by the same limit, counted
// apart (decision 045).
func (s *Server) accept(ctx context.Context, node *corev3.Node, delta, nds bool) (*conn, error) {
	px, id, err := s.identify(ctx, node)
	if err != nil {
		return nil, err
	}
	c := &conn{
		server:      s,
		id:          px.ID + "-" + strconv.FormatUint(s.nextID.Add(1), 10),
		nodeID:      px.ID,
		mesh:        px.Mesh,
		proxy:       px,
		key:         px.Key(),
		connectedAt: time.Now(),
		delta:       delta,
		types:       map[string]*typeState{},
		identity:    id,
		closed:      make(chan struct{}),
		nds:         nds,
	}
	if s.opts.Secrets != nil && id.Mesh != "" && !nds {
		c.sds = &sdsState{due: make(chan struct{}, 1), ctx: ctx}
	}
	c.peer = grpcpeer.Addr(ctx)
	s.mu.Lock()
	counts, what := s.perMesh, "proxies connected to this hub replica"
	if nds {
		counts, what = s.perMeshNDS, "name-table streams (agents) connected to this hub replica"
	}
	n := counts[c.mesh]
	if s.opts.MaxProxies != nil {
		if limit := s.opts.MaxProxies(c.mesh); limit > 0 && n >= limit {
			s.mu.Unlock()
			s.opts.LimitMetrics.Refused(c.mesh, meshlimits.Proxies)
			reason := meshlimits.Exceeded(c.mesh, what, n, meshlimits.Proxies, limit)
			s.log.Warn("proxy refused", "node", px.ID, "mesh", c.mesh, "reason", reason)
			return nil, status.Error(codes.ResourceExhausted, reason)
		}
	}
	s.conns[c.id] = c
	counts[c.mesh] = n + 1
	if !nds {
		s.opts.LimitMetrics.Usage(c.mesh, meshlimits.Proxies, float64(n+1))
	}
	s.mu.Unlock()
	// A mesh that stopped being served between identify and here had
	// its streams closed (CloseMesh) without this one: it is refused now.
	// Once c is in conns, a CloseMesh that follows sees it.
	if err := s.checkHosted(ctx, node, c.mesh); err != nil {
		s.mu.Lock()
		delete(s.conns, c.id)
		s.mu.Unlock()
		return nil, err
	}
	s.metrics.connections.Inc()
	s.log.Info("proxy connected", "conn", c.id, "mesh", c.mesh, "type", px.Type, "namespace", px.Namespace, "peer", c.peer, "delta", delta)
	return c, nil
}

func (s *Server) remove(c *conn) {
	c.releaseAll()
	c.stopSecrets()
	s.mu.Lock()
	delete(s.conns, c.id)
	counts := s.perMesh
	if c.nds {
		counts = s.perMeshNDS
	}
	n := counts[c.mesh] - 1
	if n == 0 {
		delete(counts, c.mesh)
	} else {
		counts[c.mesh] = n
	}
	if !c.nds {
		s.opts.LimitMetrics.Usage(c.mesh, meshlimits.Proxies, float64(n))
	}
	s.mu.Unlock()
	s.metrics.connections.Dec()
	s.log.Info("proxy disconnected", "conn", c.id, "mesh", c.mesh)
}

// pendingPushes counts the streams whose mesh has a newer push context than
// the one they last pushed (the per-proxy push queue's depth: at most one
// pending push per proxy, since a stream always pushes the newest).
func (s *Server) pendingPushes() float64 {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	n := 0
	for _, c := range conns {
		if st, _ := s.src.Current(c.mesh); st != nil && st.Version() > c.pushed.Load() {
			n++
		}
	}
	return float64(n)
}

// knownType reports whether the server generates typeURL: Envoy's types
// and the name table.
func knownType(typeURL string) bool {
	if typeURL == typeurl.NameTable {
		return true
	}
	for _, t := range gen.Types {
		if t == typeURL {
			return true
		}
	}
	return false
}

// ConnStatus is what /debug/syncz shows for one proxy.
type ConnStatus struct {
	ID        string `json:"id"`
	NodeID    string `json:"nodeId"`
	Mesh      string `json:"mesh"`
	ProxyType string `json:"proxyType"`
	Delta     bool   `json:"delta,omitempty"` // incremental ADS`
	// NameTable marks an agent's name-table stream (it is served the
	// name table only).
	NameTable   bool                  `json:"nameTable,omitempty"`
	Namespace   string                `json:"namespace,omitempty"`
	Peer        string                `json:"peer,omitempty"`
	ConnectedAt time.Time             `json:"connectedAt"`
	Types       map[string]TypeStatus `json:"types"`
}

// TypeStatus is one proxy's sync state for one type.
type TypeStatus struct {
	Wildcard      bool      `json:"wildcard,omitempty"`
	Subscribed    int       `json:"subscribed"`
	SentVersion   string    `json:"sentVersion,omitempty"`
	SentResources int       `json:"sentResources"`
	SentAt        time.Time `json:"sentAt,omitempty"`
	AckedVersion  string    `json:"ackedVersion,omitempty"`
	NackedVersion string    `json:"nackedVersion,omitempty"`
	NackReason    string    `json:"nackReason,omitempty"`
	Pending       bool      `json:"pending"`
}

// Status reports every connected proxy's sync state.
func (s *Server) Status() []ConnStatus {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	out := make([]ConnStatus, 0, len(conns))
	for _, c := range conns {
		out = append(out, c.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
