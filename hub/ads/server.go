// Package ads serves the Aggregated Discovery Service, state of the world
// and incremental (delta), to proxies. Each stream follows its mesh's published push context
// (pushctx.State) and sends a type only when what the proxy subscribed to
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/pushctx"
	"github.com/navemesh/nave/shared/gen"
	"github.com/navemesh/nave/shared/proxy"
)

// StateSource gives a mesh's current push context; pushctx.Manager
// implements it.
type StateSource interface {
	Current(mesh string) (*pushctx.State, <-chan struct{})
}

// Options configure a Server.
type Options struct {
	// DefaultMesh is the mesh of a proxy whose node metadata names none.
	DefaultMesh string
	Logger      *slog.Logger
	Registerer  prometheus.Registerer
}

// Server implements discoveryv3.AggregatedDiscoveryServiceServer. Safe for
// concurrent use; every stream runs on its own goroutines, so one slow
// proxy never delays another.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	src     StateSource
	opts    Options
	log     *slog.Logger
	metrics *metrics
	nextID  atomic.Uint64

	mu    sync.Mutex
	conns map[string]*conn
}

// New returns a Server serving the push contexts of src.
func New(src StateSource, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DefaultMesh == "" {
		opts.DefaultMesh = "default"
	}
	return &Server{src: src, opts: opts, log: opts.Logger, metrics: newMetrics(opts.Registerer), conns: map[string]*conn{}}
}

// MetadataMesh is the node metadata key naming a proxy's mesh.
const MetadataMesh = proxy.MetaMesh

// StreamAggregatedResources serves one proxy over state-of-the-world ADS.
func (s *Server) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return serveStream(s, stream.Context(), stream.Recv, false,
		func(c *conn, st *pushctx.State, req *discoveryv3.DiscoveryRequest) error {
			return c.handle(stream, st, req)
		},
		func(c *conn, st *pushctx.State) error { return c.pushAll(stream, st) })
}

// DeltaAggregatedResources serves one proxy over incremental (delta) ADS.
func (s *Server) DeltaAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return serveStream(s, stream.Context(), stream.Recv, true,
		func(c *conn, st *pushctx.State, req *discoveryv3.DeltaDiscoveryRequest) error {
			return c.handleDelta(stream, st, req)
		},
		func(c *conn, st *pushctx.State) error { return c.pushAllDelta(stream, st) })
}

// serveStream runs one ADS stream of either variant: requests are read on
// their own goroutine, the first one's node is accepted, and each new push
// context of the proxy's mesh is pushed with pushAll.
func serveStream[Req interface{ GetNode() *corev3.Node }](s *Server, ctx context.Context, recv func() (Req, error), delta bool,
	handle func(*conn, *pushctx.State, Req) error, pushAll func(*conn, *pushctx.State) error) error {
	reqs := make(chan Req)
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()

	var c *conn
	var state *pushctx.State
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
				if c, err = s.accept(ctx, req.GetNode(), delta); err != nil {
					return err
				}
				state, changed = s.src.Current(c.mesh)
			}
			if err := handle(c, state, req); err != nil {
				return err
			}
		case <-changed:
			state, changed = s.src.Current(c.mesh)
			if err := pushAll(c, state); err != nil {
				return err
			}
		}
	}
}

func (s *Server) accept(ctx context.Context, node *corev3.Node, delta bool) (*conn, error) {
	px, err := proxy.FromNode(node, s.opts.DefaultMesh)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
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
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.peer = p.Addr.String()
	}
	s.mu.Lock()
	s.conns[c.id] = c
	s.mu.Unlock()
	s.metrics.connections.Inc()
	s.log.Info("proxy connected", "conn", c.id, "mesh", c.mesh, "type", px.Type, "namespace", px.Namespace, "peer", c.peer, "delta", delta)
	return c, nil
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	delete(s.conns, c.id)
	s.mu.Unlock()
	s.metrics.connections.Dec()
	s.log.Info("proxy disconnected", "conn", c.id, "mesh", c.mesh)
}

// knownType reports whether the server generates typeURL.
func knownType(typeURL string) bool {
	for _, t := range gen.Types {
		if t == typeURL {
			return true
		}
	}
	return false
}

// ConnStatus is what /debug/syncz shows for one proxy.
type ConnStatus struct {
	ID          string                `json:"id"`
	NodeID      string                `json:"nodeId"`
	Mesh        string                `json:"mesh"`
	ProxyType   string                `json:"proxyType"`
	Delta       bool                  `json:"delta,omitempty"` // incremental ADS`
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

func shortType(typeURL string) string {
	for i := len(typeURL) - 1; i >= 0; i-- {
		if typeURL[i] == '.' {
			return typeURL[i+1:]
		}
	}
	return typeURL
}
