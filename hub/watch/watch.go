// Package watch serves the hub's side of Sync.Watch: the mesh-wide view a
// spoke needs to stand alone when the hub is gone (fallback). A spoke gets
// the other clusters of its own mesh — each one's resources, named
// "cluster/namespace/name", and a ClusterStatus — and its mesh's
// TrustBundle and MeshConfig, and the hub's statuses of its own cluster's
// Gateway API objects, as delta xDS in the normal direction: it subscribes per
// type URL, the hub sends what differs from what the spoke holds, and the
// spoke ACKs or NACKs every nonce. See docs/protocol.md and
// docs/decisions/019-watch-resource-model.md.
//
// The (mesh, cluster) of a stream is given by the caller, which decided it
// from the spoke's authenticated identity (ingest.Server.Watch); only that
// mesh's clusters are ever read for it (docs/design.md invariant 2). A cluster
// contributes what the hub serves of it: nothing before its first synced
// marker.
package watch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/debounce"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/xds/mesh"
)

// Source gives a mesh's clusters as the hub serves them; ingest.Store
// implements it.
type Source interface {
	Clusters(mesh string) []mesh.ClusterInput
}

// Options configure a Server.
type Options struct {
	// Roots returns mesh's roots of trust; nil (or a nil result) serves no
	// TrustBundle (plaintext hubs have no CA).
	Roots func(mesh string) (*protocolv1.TrustBundle, error)
	// MeshConfig returns mesh's Istio MeshConfig, served as the
	// protocol.MeshConfigTypeURL resource named by the mesh; nil (or a nil
	// result) serves none, which a spoke takes as Istio's defaults. When it
	// would return something else, call MeshConfigChanged. The result is
	// only read.
	MeshConfig func(mesh string) *meshv1alpha1.MeshConfig
	// MeshNetworks returns mesh's Istio MeshNetworks, served as the
	// protocol.MeshNetworksTypeURL resource named by the mesh; nil (or a
	// nil result) serves none. When it would return something else, call
	// MeshConfigChanged. The result is only read.
	MeshNetworks func(mesh string) *meshv1alpha1.MeshNetworks
	// GatewayAPIStatus returns the statuses of cluster's own Gateway API
	// objects in mesh, served as protocol.GatewayAPIStatusTypeURL
	// resources named protocol.GatewayAPIStatusName; nil serves none.
	// When it would return something else, call Notify. The result is
	// only read.
	GatewayAPIStatus func(mesh, cluster string) []*meshconfigv1.GatewayAPIStatus
	// Debounce is how long a stream waits after a change before it sends
	// what changed, so that a burst is sent once (shared/debounce with
	// quiet = max: counted from the burst's first change). Zero means
	// 100 ms.
	Debounce time.Duration
	// MaxMessageBytes bounds a response: a type whose changes are larger
	// than half of it is split over several responses. Zero means 16 MiB.
	MaxMessageBytes int
	// Ready, if set, holds a mesh's view back until it says yes (the hub
	// passes ingest.Store.Ready, as for proxies): a restarted hub does not
	// tell spokes that clusters merely slower to reconnect are gone.
	// Subscriptions wait, unanswered, until then.
	Ready func(mesh string, clusters []mesh.ClusterInput) bool
	// Hosted, if set, is asked once a stream is listed: a stream of a
	// mesh no longer served (deleted after the stream was authenticated)
	// ends at once, so that none outlives a CloseMesh it raced with.
	Hosted     func(mesh string) bool
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Server serves Watch streams. It is safe for concurrent use: Notify may
// be called from any goroutine, and each stream runs on its own.
type Server struct {
	src     Source
	opts    Options
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	changed map[string]chan struct{} // per mesh: closed (and replaced) at each Notify
	streams map[*stream]struct{}
}

// New returns a Server reading clusters from src.
func New(src Source, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Debounce == 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.MaxMessageBytes == 0 {
		opts.MaxMessageBytes = 16 << 20
	}
	return &Server{src: src, opts: opts, log: opts.Logger, metrics: newMetrics(opts.Registerer),
		changed: map[string]chan struct{}{}, streams: map[*stream]struct{}{}}
}

// Notify tells the streams of mesh that its clusters changed. It never
// blocks.
func (s *Server) Notify(mesh string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.changed[mesh]; ok {
		close(ch)
		delete(s.changed, mesh)
	}
}

// MeshConfigChanged tells the streams of mesh that Options.MeshConfig (or MeshNetworks) now
// returns another MeshConfig for it: each sends the new one (or its
// removal) after its debounce, as for a change of the clusters. It never
// blocks.
func (s *Server) MeshConfigChanged(mesh string) { s.Notify(mesh) }

// changes returns a channel closed at mesh's next Notify.
func (s *Server) changes(mesh string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.changed[mesh]
	if !ok {
		ch = make(chan struct{})
		s.changed[mesh] = ch
	}
	return ch
}

// Stream is the server side of one Watch stream.
type Stream interface {
	Context() context.Context
	Send(*discoveryv3.DeltaDiscoveryResponse) error
	Recv() (*discoveryv3.DeltaDiscoveryRequest, error)
}

// item is one resource of a view: its version, and how to encode it.
type item struct {
	version string
	encode  func() (*discoveryv3.Resource, error)
}

// view is what a spoke of (mesh, cluster) is to hold: type URL -> name -> item.
type view map[string]map[string]item

// view returns what a spoke of cluster in meshName is given: the other
// clusters' objects and statuses, the mesh's trust bundle and its
// MeshConfig.
func (s *Server) view(meshName, own string) (view, error) {
	v := view{}
	put := func(typeURL, name string, it item) {
		if v[typeURL] == nil {
			v[typeURL] = map[string]item{}
		}
		v[typeURL][name] = it
	}
	for _, c := range s.src.Clusters(meshName) {
		if c.Name == own {
			continue
		}
		for _, o := range c.Objects {
			cluster := c.Name
			put(o.Kind.TypeURL, protocol.RemoteName(cluster, o), item{version: o.Version,
				encode: func() (*discoveryv3.Resource, error) { return protocol.EncodeRemote(cluster, o) }})
		}
		st := &protocolv1.ClusterStatus{Cluster: c.Name, Connected: c.Connected, Synced: c.Synced, Stale: c.Stale,
			Resources: int64(len(c.Objects)), DomainSuffix: c.DomainSuffix}
		it, err := messageItem(c.Name, st)
		if err != nil {
			return nil, err
		}
		put(protocol.ClusterStatusTypeURL, c.Name, it)
	}
	if s.opts.Roots != nil {
		tb, err := s.opts.Roots(meshName)
		if err != nil {
			return nil, fmt.Errorf("roots of mesh %s: %w", meshName, err)
		}
		if tb != nil {
			it, err := messageItem(meshName, tb)
			if err != nil {
				return nil, err
			}
			put(protocol.TrustBundleTypeURL, meshName, it)
		}
	}
	if s.opts.MeshConfig != nil {
		if mc := s.opts.MeshConfig(meshName); mc != nil {
			it, err := messageItem(meshName, mc)
			if err != nil {
				return nil, err
			}
			put(protocol.MeshConfigTypeURL, meshName, it)
		}
	}
	if s.opts.MeshNetworks != nil {
		if nw := s.opts.MeshNetworks(meshName); nw != nil {
			it, err := messageItem(meshName, nw)
			if err != nil {
				return nil, err
			}
			put(protocol.MeshNetworksTypeURL, meshName, it)
		}
	}
	if s.opts.GatewayAPIStatus != nil {
		for _, st := range s.opts.GatewayAPIStatus(meshName, own) {
			name := protocol.GatewayAPIStatusName(st)
			it, err := messageItem(name, st)
			if err != nil {
				return nil, err
			}
			put(protocol.GatewayAPIStatusTypeURL, name, it)
		}
	}
	return v, nil
}

// messageItem is a resource whose body is m itself; its version is the
// hash of m's deterministic encoding.
func messageItem(name string, m proto.Message) (item, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return item{}, fmt.Errorf("encode %s: %w", name, err)
	}
	sum := sha256.Sum256(b)
	version := hex.EncodeToString(sum[:8])
	return item{version: version, encode: func() (*discoveryv3.Resource, error) {
		body, err := anypb.New(m)
		if err != nil {
			return nil, err
		}
		return &discoveryv3.Resource{Name: name, Version: version, Resource: body}, nil
	}}, nil
}

// Serve runs one Watch stream of a spoke of (meshName, cluster), both
// decided from its authenticated identity. It returns when the stream
// ends.
func (s *Server) Serve(meshName, cluster string, ss Stream) error {
	ctx, cancel := context.WithCancelCause(ss.Context())
	defer cancel(nil)
	st := &stream{s: s, ss: ss, ctx: ctx, cancel: cancel, mesh: meshName, cluster: cluster, held: map[string]map[string]string{},
		sent: map[string]string{}, connectedAt: time.Now()}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	s.metrics.streams.Inc()
	defer func() {
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
		s.metrics.streams.Dec()
	}()
	if s.opts.Hosted != nil && !s.opts.Hosted(meshName) {
		return status.Errorf(codes.PermissionDenied, "mesh %q is not a mesh of this hub", meshName)
	}
	s.log.Info("spoke watching", "mesh", meshName, "cluster", cluster)
	return st.run()
}

// Close ends the Watch streams of (meshName, cluster) at once with
// PermissionDenied and reason — for a revoked cluster, which must stop
// receiving its mesh. It reports how many it closed; keeping the spoke
// from watching again is the authenticator's part.
func (s *Server) Close(meshName, cluster, reason string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for st := range s.streams {
		if st.mesh == meshName && st.cluster == cluster {
			st.cancel(&closed{reason})
			n++
		}
	}
	if n > 0 {
		s.log.Warn("spoke watch closed by the hub", "mesh", meshName, "cluster", cluster, "streams", n, "reason", reason)
	}
	return n
}

// CloseMesh ends every Watch stream of meshName at once, as Close does a
// cluster's — for a mesh the hub stops serving (deleted). It reports how
// many it closed.
func (s *Server) CloseMesh(meshName, reason string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for st := range s.streams {
		if st.mesh == meshName {
			st.cancel(&closed{reason})
			n++
		}
	}
	if n > 0 {
		s.log.Warn("spoke watches of a mesh closed by the hub", "mesh", meshName, "streams", n, "reason", reason)
	}
	return n
}

// closed is the cause of a stream ended by Close.
type closed struct{ reason string }

func (c *closed) Error() string { return "the hub closed this cluster's watch: " + c.reason }

// stream is one Watch stream's state; its fields are used by its run
// goroutine only, except those under mu (read by Status).
type stream struct {
	s             *Server
	ss            Stream
	ctx           context.Context
	cancel        context.CancelCauseFunc
	mesh, cluster string
	connectedAt   time.Time
	nonce         uint64
	// held is what the spoke holds, per subscribed type: name -> version.
	held map[string]map[string]string
	// sent maps each unanswered nonce to its type URL.
	sent map[string]string
	// waiting holds subscriptions received before the mesh was ready.
	waiting []*discoveryv3.DeltaDiscoveryRequest

	mu          sync.Mutex
	acks, nacks uint64
	lastNack    string
	synced      bool
}

func (st *stream) run() error {
	ctx := st.ctx
	reqs := make(chan *discoveryv3.DeltaDiscoveryRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := st.ss.Recv()
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
	changes := st.s.changes(st.mesh)
	// A window from the first change (quiet = max): later changes of the
	// burst do not delay the send.
	deb := debounce.New(debounce.Trailing, st.s.opts.Debounce, st.s.opts.Debounce)
	defer deb.Stop()
	for {
		select {
		case <-ctx.Done():
			if c := (*closed)(nil); errors.As(context.Cause(ctx), &c) {
				return status.Error(codes.PermissionDenied, c.Error())
			}
			return ctx.Err()
		case err := <-recvErr:
			if err == io.EOF {
				return nil
			}
			return err
		case r := <-reqs:
			if err := st.request(r); err != nil {
				return err
			}
		case <-changes:
			changes = st.s.changes(st.mesh)
			deb.Event()
		case <-deb.C():
			if err := st.push(); err != nil {
				return err
			}
			if st.waiting != nil && st.ready() {
				waiting := st.waiting
				st.waiting = nil
				for _, r := range waiting {
					if err := st.request(r); err != nil {
						return err
					}
				}
			}
		}
	}
}

// request handles one request: an ACK or NACK of a nonce, and/or a new
// subscription to a type (answered at once).
func (st *stream) request(r *discoveryv3.DeltaDiscoveryRequest) error {
	if n := r.GetResponseNonce(); n != "" {
		typeURL, ok := st.sent[n]
		if !ok {
			st.s.log.Warn("spoke answered an unknown watch nonce", "mesh", st.mesh, "cluster", st.cluster, "nonce", n)
		}
		delete(st.sent, n)
		st.mu.Lock()
		if r.GetErrorDetail() != nil {
			st.nacks++
			st.lastNack = r.GetErrorDetail().GetMessage()
		} else {
			st.acks++
			if typeURL == protocol.SyncedTypeURL {
				st.synced = true
			}
		}
		st.mu.Unlock()
		if r.GetErrorDetail() != nil {
			st.s.metrics.answers.WithLabelValues("nack").Inc()
			st.s.log.Warn("spoke refused watch resources", "mesh", st.mesh, "cluster", st.cluster, "type", typeURL, "reason", r.GetErrorDetail().GetMessage())
		} else {
			st.s.metrics.answers.WithLabelValues("ack").Inc()
		}
		return nil
	}
	if st.waiting != nil || !st.ready() {
		st.waiting = append(st.waiting, r) // answered in order once ready
		return nil
	}
	typeURL := r.GetTypeUrl()
	if typeURL == protocol.SyncedTypeURL {
		// Every earlier subscription has been answered: the initial view
		// is complete.
		return st.send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL})
	}
	if !watchable(typeURL) {
		return status.Errorf(codes.InvalidArgument, "watch: type URL %q is not served on Watch", typeURL)
	}
	if _, ok := st.held[typeURL]; ok {
		return nil // already subscribed: the wildcard subscription stands
	}
	held := map[string]string{}
	for name, version := range r.GetInitialResourceVersions() {
		held[name] = version
	}
	st.held[typeURL] = held
	v, err := st.s.view(st.mesh, st.cluster)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return st.sendType(typeURL, v[typeURL])
}

func (st *stream) ready() bool {
	return st.s.opts.Ready == nil || st.s.opts.Ready(st.mesh, st.s.src.Clusters(st.mesh))
}

func watchable(typeURL string) bool {
	for _, t := range protocol.WatchTypeURLs() {
		if t == typeURL {
			return true
		}
	}
	return false
}

// push sends, for every subscribed type, what changed since it was last
// sent.
func (st *stream) push() error {
	v, err := st.s.view(st.mesh, st.cluster)
	if err != nil {
		st.s.log.Error("watch view not built; nothing sent", "mesh", st.mesh, "cluster", st.cluster, "err", err)
		return nil
	}
	types := make([]string, 0, len(st.held))
	for t := range st.held {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		if err := st.sendType(t, v[t]); err != nil {
			return err
		}
	}
	return nil
}

// sendType sends typeURL's difference between want and what the spoke
// holds, split to respect the message budget; nothing when equal.
func (st *stream) sendType(typeURL string, want map[string]item) error {
	held := st.held[typeURL]
	var names, removed []string
	for name, it := range want {
		if held[name] != it.version {
			names = append(names, name)
		}
	}
	for name := range held {
		if _, ok := want[name]; !ok {
			removed = append(removed, name)
		}
	}
	if len(names) == 0 && len(removed) == 0 {
		return nil
	}
	sort.Strings(names)
	sort.Strings(removed)
	budget := st.s.opts.MaxMessageBytes / 2
	msg := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL, RemovedResources: removed}
	size := 0
	flush := func() error {
		if len(msg.Resources) == 0 && len(msg.RemovedResources) == 0 {
			return nil
		}
		if err := st.send(msg); err != nil {
			return err
		}
		for _, r := range msg.Resources {
			held[r.GetName()] = r.GetVersion()
		}
		for _, n := range msg.RemovedResources {
			delete(held, n)
		}
		msg, size = &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL}, 0
		return nil
	}
	for _, name := range names {
		r, err := want[name].encode()
		if err != nil {
			st.s.log.Error("watch resource not sent", "mesh", st.mesh, "cluster", st.cluster, "name", name, "err", err)
			continue
		}
		n := proto.Size(r)
		if size > 0 && size+n > budget {
			if err := flush(); err != nil {
				return err
			}
		}
		msg.Resources = append(msg.Resources, r)
		size += n
	}
	return flush()
}

func (st *stream) send(msg *discoveryv3.DeltaDiscoveryResponse) error {
	st.nonce++
	msg.Nonce = strconv.FormatUint(st.nonce, 10)
	msg.SystemVersionInfo = protocol.Version
	if err := st.ss.Send(msg); err != nil {
		return err
	}
	st.sent[msg.Nonce] = msg.TypeUrl
	st.s.metrics.responses.Inc()
	st.s.metrics.resources.Add(float64(len(msg.Resources) + len(msg.RemovedResources)))
	return nil
}

// StreamStatus is what /debug/watch shows for one stream.
type StreamStatus struct {
	Mesh        string    `json:"mesh"`
	Cluster     string    `json:"cluster"`
	ConnectedAt time.Time `json:"connectedAt"`
	Synced      bool      `json:"synced"`
	Acks        uint64    `json:"acks"`
	Nacks       uint64    `json:"nacks"`
	LastNack    string    `json:"lastNack,omitempty"`
}

// Status lists the open Watch streams.
func (s *Server) Status() []StreamStatus {
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	out := make([]StreamStatus, 0, len(streams))
	for _, st := range streams {
		st.mu.Lock()
		out = append(out, StreamStatus{Mesh: st.mesh, Cluster: st.cluster, ConnectedAt: st.connectedAt, Synced: st.synced,
			Acks: st.acks, Nacks: st.nacks, LastNack: st.lastNack})
		st.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Mesh+"/"+out[i].Cluster < out[j].Mesh+"/"+out[j].Cluster })
	return out
}
