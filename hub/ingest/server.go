// Package ingest receives spokes' Push streams and keeps one store per
// (mesh, cluster). It validates every resource (a bad one is NACKed with a
// reason naming it while the last good version stays), prunes what a spoke
// no longer has only after its synced marker, and never deletes a
// disconnected cluster's resources before its grace period has passed.
//
// Ingest never waits on pushes (DESIGN.md invariant 7): it reports changes
// through a non-blocking callback.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/grpcpeer"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx"
)

// Options configure a Server.
type Options struct {
	// StaleGracePeriod is how long a disconnected cluster's resources are
	// kept (marked stale) before they are withdrawn.
	StaleGracePeriod time.Duration
	// OnChange is called, without locks held, after a mesh's resources or
	// cluster states changed. It must not block.
	OnChange func(mesh string)
	// OnEndpointChange, if set, is called instead of OnChange when a
	// message changed only endpoint kinds (WorkloadEntry, Workload), so
	// that endpoint updates can skip the config debounce. It must not block.
	OnEndpointChange func(mesh string)
	// Expected lists the clusters the hub expects to come back after it
	// starts (the enrolled ones, not revoked); nil expects none. Until
	// StartupGrace has passed since New, Ready publishes a mesh only once
	// every expected cluster of it has synced.
	Expected     func() []ClusterIdentity
	StartupGrace time.Duration
	// Watch serves the Watch streams, once authenticated (see Watch); nil
	// answers them UNIMPLEMENTED.
	Watch  WatchHandler
	Logger *slog.Logger
	// Registerer receives the ingest metrics; nil registers nowhere.
	Registerer prometheus.Registerer

	// Replica is this hub replica's id (hub/replica), which the epochs of
	// its spokes' streams carry; "" for a single hub.
	Replica string
	// MayWithdraw, if set, decides when a disconnected cluster's grace
	// period is over whether this replica withdraws it now; owner is the
	// replica whose stream last wrote it (Replica for a spoke's own). On
	// false it is asked again every RecheckWithdrawal. It is called with
	// the Server's lock held: it must not call the Server. nil: always.
	MayWithdraw       func(id ClusterIdentity, owner string) bool
	RecheckWithdrawal time.Duration
	// OnWithdrawn, if set, is called without locks after a cluster was
	// withdrawn when its grace period was over, with its epoch: replica
	// peers are told (WithdrawRelayed). It must not block.
	OnWithdrawn func(id ClusterIdentity, epoch Epoch)
	// OnCluster, if set, is called without locks after a cluster's stored
	// state, stream or epoch changed (the replica relay follows it). It
	// must not block.
	OnCluster func(id ClusterIdentity)
	// MaxMessageBytes is the largest message the streams' peers accept
	// (spokes.maxMessageBytes); a resume hint is split to stay under half
	// of it. 0: 16 MiB.
	MaxMessageBytes int
}

// origin says whose stream writes a cluster: a spoke's own (relayed
// false) or a peer replica's relay of its spoke's stream.
type origin struct {
	polled  bool // the hub dialled the spoke (Poll)
	relayed bool
	owner   string
	epoch   Epoch
}

// Server implements the hub side of the Sync service. It is safe for
// concurrent use; each stream is served by its own goroutines.
type Server struct {
	protocolv1.UnimplementedSyncServer

	auth    Authenticator
	opts    Options
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	stores  map[ClusterIdentity]*store
	session uint64
	// withdrawn lists the clusters withdrawn after their grace period,
	// until they reconnect or are revoked (Withdraw).
	withdrawn map[ClusterIdentity]Withdrawal
	// started is when the Server was made; the startup grace runs from it.
	started time.Time
}

// Withdrawal says when and why a cluster's resources were withdrawn. A
// plain value.
type Withdrawal struct {
	At        time.Time `json:"at"`
	Reason    string    `json:"reason"`
	Resources int       `json:"resources"`
}

var errSuperseded = errors.New("superseded by a newer stream of the same cluster")

// disconnected is the cause of a stream closed by Disconnect.
type disconnected struct{ reason string }

func (d *disconnected) Error() string { return "the hub closed this cluster's stream: " + d.reason }

// moved is the cause of a stream closed by Move.
type moved struct{ reason, redirect string }

func (m *moved) Error() string {
	msg := "reconnect now: " + m.reason
	if m.redirect != "" {
		msg += "; try " + m.redirect + " first"
	}
	return msg
}

// New returns a Server that authenticates spokes with auth.
func New(auth Authenticator, opts Options) *Server {
	if opts.OnChange == nil {
		opts.OnChange = func(string) {}
	}
	if opts.OnEndpointChange == nil {
		opts.OnEndpointChange = opts.OnChange
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.OnCluster == nil {
		opts.OnCluster = func(ClusterIdentity) {}
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 16 << 20
	}
	if opts.RecheckWithdrawal <= 0 {
		opts.RecheckWithdrawal = 5 * time.Second
	}
	s := &Server{
		auth:      auth,
		opts:      opts,
		log:       opts.Logger,
		stores:    map[ClusterIdentity]*store{},
		withdrawn: map[ClusterIdentity]Withdrawal{},
		started:   time.Now(),
	}
	s.metrics = newMetrics(opts.Registerer, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.withdrawn))
	}, func() float64 { return float64(len(s.missing())) })
	if opts.Expected != nil && opts.StartupGrace > 0 {
		// When the grace ends, meshes still waiting for a cluster are
		// built with what came back.
		time.AfterFunc(opts.StartupGrace, func() {
			meshes := map[string]bool{}
			for _, id := range s.missing() {
				meshes[id.Mesh] = true
			}
			for m := range meshes {
				s.log.Warn("startup grace over; serving the mesh without clusters that did not come back", "mesh", m, "grace", opts.StartupGrace)
				opts.OnChange(m)
			}
		})
	}
	return s
}

// Push serves one spoke stream.
func (s *Server) Push(stream protocolv1.Sync_PushServer) error {
	id, suffix, err := s.admit(stream.Context())
	if err != nil {
		return err
	}
	return s.serve(stream, id, suffix, origin{})
}

// Poll serves a stream the hub dialled to a polled spoke (hub/poll):
// stream's Context carries the spoke's TLS peer (its cluster certificate)
// and, as incoming metadata, the header the spoke answered with, so the
// Authenticator decides the stream's identity exactly as for Push — an
// unknown, untrusted or revoked cluster is refused the same way. The
// identity must also be want, the cluster configured at the address
// dialled, else the stream is refused with PermissionDenied. From then on
// it is held exactly like a Push stream.
func (s *Server) Poll(stream protocolv1.Sync_PushServer, want ClusterIdentity) error {
	id, suffix, err := s.admit(stream.Context())
	if err != nil {
		return err
	}
	if err := s.checkPolled(stream.Context(), id, want); err != nil {
		return err
	}
	return s.serve(stream, id, suffix, origin{polled: true})
}

// checkPolled refuses, with PermissionDenied, a polled spoke authenticated
// as id when the hub dialled it as want.
func (s *Server) checkPolled(ctx context.Context, id, want ClusterIdentity) error {
	if id == want {
		return nil
	}
	s.metrics.refused.Inc()
	err := status.Errorf(codes.PermissionDenied, "the spoke at %s is cluster %s, but this address is configured for %s", grpcpeer.Addr(ctx), id, want)
	s.log.Warn("polled spoke refused", "mesh", want.Mesh, "cluster", want.Cluster, "reason", err)
	return err
}

// admit authenticates a spoke's stream and checks its protocol version
// and domain suffix; every refusal is counted and logged.
func (s *Server) admit(ctx context.Context) (ClusterIdentity, string, error) {
	id, err := s.auth.Authenticate(ctx)
	if err != nil {
		s.metrics.refused.Inc()
		s.log.Warn("spoke stream refused", "reason", err)
		return id, "", err
	}
	if err := checkProtocol(ctx); err != nil {
		s.metrics.refused.Inc()
		s.log.Warn("spoke stream refused", "mesh", id.Mesh, "cluster", id.Cluster, "reason", err)
		return id, "", err
	}
	suffix, err := domainSuffix(ctx)
	if err != nil {
		s.metrics.refused.Inc()
		s.log.Warn("spoke stream refused", "mesh", id.Mesh, "cluster", id.Cluster, "reason", err)
		return id, "", err
	}
	return id, suffix, nil
}

// Relay serves a stream on which the peer replica owner relays the state
// of its spoke id under epoch (hub/replica): it is held exactly like a
// spoke's own stream (staged until the synced marker, pruned only then,
// never on disconnect), unless the cluster already has a newer epoch — a
// late relay from an earlier owner — which is refused with
// FailedPrecondition. The caller has authenticated the peer as a replica.
func (s *Server) Relay(stream protocolv1.Sync_PushServer, id ClusterIdentity, owner string, epoch Epoch) error {
	if err := checkProtocol(stream.Context()); err != nil {
		return err
	}
	suffix, err := domainSuffix(stream.Context())
	if err != nil {
		return err
	}
	return s.serve(stream, id, suffix, origin{relayed: true, owner: owner, epoch: epoch})
}

// serve holds one stream of id's state until it ends.
func (s *Server) serve(stream protocolv1.Sync_PushServer, id ClusterIdentity, suffix string, o origin) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	session, err := s.open(id, cancel, grpcpeer.Addr(stream.Context()), suffix, o)
	if err != nil {
		s.log.Info("relayed stream refused", "mesh", id.Mesh, "cluster", id.Cluster, "owner", o.owner, "reason", err)
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	defer s.close(id, session)

	kind := "spoke"
	switch {
	case o.relayed:
		kind = "relay"
	case o.polled:
		kind = "polled"
	}
	first := true
	received := s.metrics.received.WithLabelValues(kind)

	msgs := make(chan *discoveryv3.DeltaDiscoveryResponse)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			cause := context.Cause(ctx)
			if errors.Is(cause, errSuperseded) {
				return status.Error(codes.Aborted, cause.Error())
			}
			if d := (*disconnected)(nil); errors.As(cause, &d) {
				return status.Error(codes.PermissionDenied, d.Error())
			}
			if m := (*moved)(nil); errors.As(cause, &m) {
				tr := metadata.Pairs(protocol.TrailerReconnect, "now")
				if m.redirect != "" {
					tr.Set(protocol.TrailerRedirect, m.redirect)
				}
				stream.SetTrailer(tr)
				return status.Error(codes.Unavailable, m.Error())
			}
			return ctx.Err()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case m := <-msgs:
			received.Add(float64(proto.Size(m)))
			if m.GetTypeUrl() == protocol.ResumeTypeURL {
				for _, r := range s.resume(id, session, kind, first, m) {
					if err := stream.Send(r); err != nil {
						return err
					}
				}
				first = false
				continue
			}
			first = false
			if err := stream.Send(s.apply(id, session, m)); err != nil {
				return err
			}
		}
	}
}

// open registers a new stream for id, superseding any older one; it
// refuses a relayed stream whose epoch is older than id's current one.
func (s *Server) open(id ClusterIdentity, cancel func(error), peer, suffix string, o origin) (uint64, error) {
	s.mu.Lock()
	defer s.opts.OnCluster(id)
	defer s.mu.Unlock()
	st := s.stores[id]
	if o.relayed && st != nil && o.epoch.Before(st.epoch) {
		return 0, fmt.Errorf("epoch %s of replica %s is older than the cluster's current epoch %s: a late relay from an earlier owner is ignored", o.epoch, o.owner, st.epoch)
	}
	if st == nil {
		st = newStore(id)
		s.stores[id] = st
	}
	if !o.relayed {
		// A spoke's own stream starts a new epoch, after any the cluster
		// had here, even with a clock that stepped back.
		o.owner = s.opts.Replica
		o.epoch = Epoch{At: max(time.Now().UnixNano(), st.epoch.At+1), Replica: s.opts.Replica}
	}
	st.epoch, st.owner, st.relayed, st.polled = o.epoch, o.owner, o.relayed, o.polled
	delete(s.withdrawn, id)
	if st.cancel != nil {
		st.cancel(errSuperseded)
	}
	if st.withdraw != nil {
		st.withdraw.Stop()
		st.withdraw = nil
	}
	s.session++
	st.session = s.session
	st.cancel = cancel
	st.peer = peer
	if st.domainSuffix != suffix && st.everSynced {
		s.log.Warn("cluster changed its domain suffix", "mesh", id.Mesh, "cluster", id.Cluster, "was", st.domainSuffix, "now", suffix)
	}
	st.domainSuffix = suffix
	st.connected = true
	st.synced = false
	st.staged = nil // a new stream sends its full state anew
	st.hinted, st.resumed = nil, false
	st.connectedAt = time.Now()
	s.metrics.streams.Inc()
	if o.relayed {
		s.log.Info("relayed cluster stream opened", "mesh", id.Mesh, "cluster", id.Cluster, "owner", o.owner, "epoch", o.epoch, "session", st.session)
	} else {
		s.log.Info("spoke connected", "mesh", id.Mesh, "cluster", id.Cluster, "peer", peer, "session", st.session, "epoch", o.epoch)
	}
	return st.session, nil
}

// Disconnect closes id's open Push stream, if it has one, at once: the
// spoke gets PermissionDenied with reason (say, "cluster revoked"). It
// reports whether a stream was open. The cluster's resources are then kept
// for the grace period like those of any disconnected cluster; keeping the
// spoke from reconnecting is the Authenticator's part.
func (s *Server) Disconnect(id ClusterIdentity, reason string) bool {
	s.mu.Lock()
	st := s.stores[id]
	if st == nil || st.cancel == nil {
		s.mu.Unlock()
		return false
	}
	st.cancel(&disconnected{reason: reason})
	st.cancel = nil
	session := st.session
	s.mu.Unlock()
	s.log.Warn("spoke stream closed by the hub", "mesh", id.Mesh, "cluster", id.Cluster, "session", session, "reason", reason)
	return true
}

// Move closes id's open Push stream, if it is a spoke's own (not a
// relay) and still the stream of epoch, so that the spoke reconnects at
// once, to another hub replica (hub/replica balances spokes): the spoke
// gets UNAVAILABLE with the trailers protocol.TrailerReconnect and, if
// redirect is set, protocol.TrailerRedirect naming the replica to try
// first. The cluster's resources stay, as for any disconnect, until the
// spoke's new stream (here or relayed by its new owner) replaces them. It
// reports whether a stream was closed; a polled spoke's never is.
func (s *Server) Move(id ClusterIdentity, epoch Epoch, reason, redirect string) bool {
	s.mu.Lock()
	st := s.stores[id]
	if st == nil || st.cancel == nil || st.relayed || st.polled || st.epoch != epoch {
		// A polled spoke is not moved: the hub dials it, and which
		// replica does is hub/poll's decision.
		s.mu.Unlock()
		return false
	}
	st.cancel(&moved{reason: reason, redirect: redirect})
	st.cancel = nil
	session := st.session
	s.mu.Unlock()
	s.log.Info("spoke asked to reconnect elsewhere", "mesh", id.Mesh, "cluster", id.Cluster, "session", session, "reason", reason, "redirect", redirect)
	return true
}

// Withdraw cuts id off at once: it closes id's open Push stream, if any
// (the spoke gets PermissionDenied with reason), and drops its resources
// without waiting for the grace period — for a revoked cluster, whose
// endpoints must not attract traffic any longer. It reports whether there
// was anything to withdraw; keeping the spoke from reconnecting is the
// Authenticator's part.
func (s *Server) Withdraw(id ClusterIdentity, reason string) bool {
	s.mu.Lock()
	delete(s.withdrawn, id) // revoked: listed by enrollment, not here
	st := s.stores[id]
	if st == nil {
		s.mu.Unlock()
		return false
	}
	if st.cancel != nil {
		st.cancel(&disconnected{reason: reason})
	}
	if st.withdraw != nil {
		st.withdraw.Stop()
	}
	s.drop(id, st, "cluster withdrawn at once", "reason", reason)
	return true
}

// close marks id disconnected if session is still its current stream, and
// schedules the withdrawal of its resources after the grace period.
func (s *Server) close(id ClusterIdentity, session uint64) {
	s.metrics.streams.Dec()
	s.mu.Lock()
	st := s.stores[id]
	if st == nil || st.session != session {
		s.mu.Unlock()
		return
	}
	st.connected = false
	st.cancel = nil
	st.disconnectedAt = time.Now()
	st.withdraw = time.AfterFunc(s.opts.StaleGracePeriod, func() { s.withdraw(id, session) })
	relayed, owner := st.relayed, st.owner
	s.mu.Unlock()
	if relayed {
		s.log.Warn("relayed cluster stream ended; resources kept as stale", "mesh", id.Mesh, "cluster", id.Cluster, "owner", owner, "grace", s.opts.StaleGracePeriod)
	} else {
		s.log.Warn("spoke disconnected; resources kept as stale", "mesh", id.Mesh, "cluster", id.Cluster, "grace", s.opts.StaleGracePeriod)
	}
	s.opts.OnCluster(id)
	s.opts.OnChange(id.Mesh)
}

func (s *Server) withdraw(id ClusterIdentity, session uint64) {
	s.mu.Lock()
	st := s.stores[id]
	if st == nil || st.session != session || st.connected {
		s.mu.Unlock()
		return
	}
	if s.opts.MayWithdraw != nil && !s.opts.MayWithdraw(id, st.owner) {
		// Not this replica's decision now (its owner is alive elsewhere,
		// or this replica is cut off from most of its peers): ask again.
		st.withdraw = time.AfterFunc(s.opts.RecheckWithdrawal, func() { s.withdraw(id, session) })
		s.mu.Unlock()
		return
	}
	epoch := st.epoch
	s.withdrawn[id] = Withdrawal{At: time.Now(), Resources: st.count(),
		Reason: fmt.Sprintf("disconnected at %s and not back within the grace period (%s)", st.disconnectedAt.UTC().Format(time.RFC3339), s.opts.StaleGracePeriod)}
	s.drop(id, st, "stale cluster withdrawn after grace period")
	if s.opts.OnWithdrawn != nil {
		s.opts.OnWithdrawn(id, epoch)
	}
}

// WithdrawRelayed withdraws id as a peer replica did after its grace
// period, unless id is connected here or holds a newer epoch than epoch
// (it came back since). It reports whether it withdrew.
func (s *Server) WithdrawRelayed(id ClusterIdentity, epoch Epoch, reason string) bool {
	s.mu.Lock()
	st := s.stores[id]
	if st == nil || st.connected || epoch.Before(st.epoch) {
		s.mu.Unlock()
		return false
	}
	if st.withdraw != nil {
		st.withdraw.Stop()
	}
	s.withdrawn[id] = Withdrawal{At: time.Now(), Resources: st.count(), Reason: reason}
	s.drop(id, st, "stale cluster withdrawn by a peer replica", "epoch", epoch, "reason", reason)
	return true
}

// drop removes id's store st (s.mu held; drop releases it), its metrics,
// logs msg with attrs, and reports the change.
func (s *Server) drop(id ClusterIdentity, st *store, msg string, attrs ...any) {
	n := st.count()
	delete(s.stores, id)
	s.mu.Unlock()
	s.metrics.resources.DeleteLabelValues(id.Mesh, id.Cluster)
	s.metrics.withdrawals.Inc()
	s.log.Warn(msg, append([]any{"mesh", id.Mesh, "cluster", id.Cluster, "resources", n}, attrs...)...)
	s.opts.OnCluster(id)
	s.opts.OnChange(id.Mesh)
}

// apply stores one message and returns its ACK or NACK.
func (s *Server) apply(id ClusterIdentity, session uint64, m *discoveryv3.DeltaDiscoveryResponse) *discoveryv3.DeltaDiscoveryRequest {
	reply := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: m.GetTypeUrl(), ResponseNonce: m.GetNonce()}
	if m.GetNonce() == "" {
		return s.nack(id, reply, "message has no nonce", nil)
	}
	s.mu.Lock()
	st := s.stores[id]
	if st == nil || st.session != session {
		s.mu.Unlock()
		return s.nack(id, reply, "stream superseded", nil)
	}
	st.lastMessageAt = time.Now()
	changed, endpoints := false, false
	var rejections []*protocolv1.Rejection
	switch {
	case m.GetTypeUrl() == protocol.SyncedTypeURL:
		if !st.synced {
			staged := st.stagedCount()
			skipped := len(st.hinted)
			var removed int
			changed, removed = st.sync()
			if st.resumed {
				s.metrics.skipped.Add(float64(skipped))
			}
			s.log.Info("spoke synced", "mesh", id.Mesh, "cluster", id.Cluster, "resources", st.count(), "applied", staged, "removed", removed, "resumed", st.resumed, "unchanged", skipped)
		}
	default:
		kind, ok := meshconfig.KindByTypeURL(m.GetTypeUrl())
		if !ok {
			st.nacks++
			s.mu.Unlock()
			return s.nack(id, reply, fmt.Sprintf("unknown type URL %q", m.GetTypeUrl()), nil)
		}
		endpoints = kind.EndpointsOnly()
		for _, r := range m.GetResources() {
			o, err := protocol.DecodeKind(kind, r)
			key := resourceKey{m.GetTypeUrl(), r.GetName()}
			delete(st.hinted, key)
			if err != nil {
				var de *protocol.DecodeError
				reason := err.Error()
				if errors.As(err, &de) {
					reason = de.Reason
				}
				rejections = append(rejections, &protocolv1.Rejection{TypeUrl: m.GetTypeUrl(), Name: r.GetName(), Reason: reason})
				rj := meshconfig.Rejection{Kind: kind.Kind, Name: r.GetName(), Reason: reason, At: time.Now()}
				if ns, name, ok := meshconfig.SplitKey(r.GetName()); ok {
					rj.Namespace, rj.Name = ns, name
				}
				st.rejected[key] = rj
				st.keep(m.GetTypeUrl(), r.GetName(), session)
				continue
			}
			delete(st.rejected, key)
			if st.put(m.GetTypeUrl(), o, session) {
				changed = true
			}
		}
		for _, name := range m.GetRemovedResources() {
			delete(st.hinted, resourceKey{m.GetTypeUrl(), name})
			delete(st.rejected, resourceKey{m.GetTypeUrl(), name})
			if st.remove(m.GetTypeUrl(), name) {
				changed = true
			}
		}
	}
	if len(rejections) > 0 {
		st.nacks++
	} else {
		st.acks++
	}
	s.metrics.resources.WithLabelValues(id.Mesh, id.Cluster).Set(float64(st.count()))
	s.mu.Unlock()

	if changed {
		s.opts.OnCluster(id)
	}
	switch {
	case changed && endpoints:
		s.opts.OnEndpointChange(id.Mesh)
	case changed:
		s.opts.OnChange(id.Mesh)
	}
	if len(rejections) > 0 {
		return s.nack(id, reply, "", rejections)
	}
	s.metrics.messages.WithLabelValues("ack").Inc()
	return reply
}

func (s *Server) nack(id ClusterIdentity, reply *discoveryv3.DeltaDiscoveryRequest, msg string, rejections []*protocolv1.Rejection) *discoveryv3.DeltaDiscoveryRequest {
	s.metrics.messages.WithLabelValues("nack").Inc()
	s.metrics.rejected.Add(float64(len(rejections)))
	if msg == "" {
		parts := make([]string, 0, len(rejections))
		for _, r := range rejections {
			parts = append(parts, fmt.Sprintf("%s: %s", r.GetName(), r.GetReason()))
		}
		msg = fmt.Sprintf("%d resource(s) rejected: %s", len(rejections), strings.Join(parts, "; "))
	}
	st := &statuspb.Status{Code: int32(codes.InvalidArgument), Message: msg}
	if len(rejections) > 0 {
		detail, err := anypb.New(&protocolv1.Rejections{Items: rejections})
		if err == nil {
			st.Details = []*anypb.Any{detail}
		}
	}
	reply.ErrorDetail = st
	s.log.Warn("spoke message rejected", "mesh", id.Mesh, "cluster", id.Cluster, "type", reply.GetTypeUrl(), "nonce", reply.GetResponseNonce(), "reason", msg)
	return reply
}

// Ready reports whether mesh may be published for the first time
// (pushctx.Options.Ready): during the startup grace, once every expected
// cluster of it has synced; after, once any cluster has. A hub that
// restarts thus never shows proxies a mesh missing a cluster that is
// merely slower to reconnect (DESIGN.md invariant 8).
func (s *Server) Ready(mesh string, clusters []mesh.ClusterInput) bool {
	if !pushctx.AnySynced(mesh, clusters) {
		return false
	}
	if s.opts.Expected == nil || time.Since(s.started) >= s.opts.StartupGrace {
		return true
	}
	synced := map[string]bool{}
	for _, c := range clusters {
		synced[c.Name] = synced[c.Name] || c.Synced
	}
	for _, id := range s.opts.Expected() {
		if id.Mesh == mesh && !synced[id.Cluster] {
			return false
		}
	}
	return true
}

// missing lists the expected clusters that have not connected since the
// Server started.
func (s *Server) missing() []ClusterIdentity {
	if s.opts.Expected == nil {
		return nil
	}
	expected := s.opts.Expected()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ClusterIdentity
	for _, id := range expected {
		if s.isMissing(id) {
			out = append(out, id)
		}
	}
	return out
}

// isMissing reports whether the Server has heard nothing of id since it
// started (s.mu held).
func (s *Server) isMissing(id ClusterIdentity) bool {
	_, withdrawn := s.withdrawn[id]
	return s.stores[id] == nil && !withdrawn
}

// Meshes lists the meshes that have at least one cluster.
func (s *Server) Meshes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for id := range s.stores {
		if !seen[id.Mesh] {
			seen[id.Mesh] = true
			out = append(out, id.Mesh)
		}
	}
	sort.Strings(out)
	return out
}

// Clusters returns every cluster of mesh with its objects, for a snapshot
// build. Objects are immutable and shared.
func (s *Server) Clusters(meshName string) []mesh.ClusterInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []mesh.ClusterInput
	for id, st := range s.stores {
		if id.Mesh == meshName {
			out = append(out, st.input())
		}
	}
	return out
}

// ClusterStatus is what /debug/spokes shows for one cluster.
type ClusterStatus struct {
	ClusterIdentity
	Peer           string                 `json:"peer,omitempty"`
	Connected      bool                   `json:"connected"`
	Synced         bool                   `json:"synced"`
	Stale          bool                   `json:"stale"`
	ConnectedAt    time.Time              `json:"connectedAt"`
	DisconnectedAt *time.Time             `json:"disconnectedAt,omitempty"`
	WithdrawAt     *time.Time             `json:"withdrawAt,omitempty"`
	LastMessageAt  time.Time              `json:"lastMessageAt"`
	Resources      map[string]int         `json:"resources"`
	Acks           uint64                 `json:"acks"`
	Nacks          uint64                 `json:"nacks"`
	Rejected       []meshconfig.Rejection `json:"rejected"`
	// Pending counts what the stream sent that waits for its synced marker.
	Pending int `json:"pending,omitempty"`
	// DomainSuffix is the cluster's DNS suffix, as its spoke said.
	DomainSuffix string `json:"domainSuffix,omitempty"`
	// Withdrawn is set for a cluster withdrawn after its grace period that
	// has not reconnected since; it contributes nothing.
	Withdrawn *Withdrawal `json:"withdrawn,omitempty"`
	// Missing is set for an enrolled cluster that has not connected since
	// the hub started: when the hub started waiting for it.
	Missing *time.Time `json:"missing,omitempty"`
	// Epoch is the cluster's current ownership epoch; Owner the replica
	// holding the spoke's stream, and Relayed set when that is a peer
	// (the state came through its relay). See hub/replica.
	Epoch   Epoch  `json:"epoch"`
	Owner   string `json:"owner,omitempty"`
	Relayed bool   `json:"relayed,omitempty"`
	// Polled is set when the stream was dialled by the hub (polled mode;
	// /debug/polled has the dialling side).
	Polled bool `json:"polled,omitempty"`
	// Resumed is set when the current or last stream resumed: the hub
	// told it what it held and it sent only what differed.
	Resumed bool `json:"resumed,omitempty"`
}

// Status reports every cluster's stream and sync state, and the clusters
// withdrawn after their grace period that have not come back.
func (s *Server) Status() []ClusterStatus {
	var expected []ClusterIdentity
	if s.opts.Expected != nil {
		expected = s.opts.Expected() // may read a store: not under s.mu
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ClusterStatus, 0, len(s.stores))
	for id, st := range s.stores {
		cs := ClusterStatus{
			ClusterIdentity: id, Peer: st.peer, Connected: st.connected, Synced: st.synced, Stale: !st.connected,
			ConnectedAt: st.connectedAt, LastMessageAt: st.lastMessageAt,
			Resources: map[string]int{}, Acks: st.acks, Nacks: st.nacks, Rejected: []meshconfig.Rejection{},
		}
		if !st.connected {
			d := st.disconnectedAt
			w := d.Add(s.opts.StaleGracePeriod)
			cs.DisconnectedAt, cs.WithdrawAt = &d, &w
		}
		for typeURL, byName := range st.resources {
			if k, ok := meshconfig.KindByTypeURL(typeURL); ok && len(byName) > 0 {
				cs.Resources[k.Kind] = len(byName)
			}
		}
		for _, r := range st.rejected {
			cs.Rejected = append(cs.Rejected, r)
		}
		sort.Slice(cs.Rejected, func(i, j int) bool {
			a, b := cs.Rejected[i], cs.Rejected[j]
			return meshconfig.Key(a.Namespace, a.Name) < meshconfig.Key(b.Namespace, b.Name)
		})
		cs.Pending = st.stagedCount()
		cs.DomainSuffix = st.domainSuffix
		cs.Epoch, cs.Owner, cs.Relayed, cs.Polled, cs.Resumed = st.epoch, st.owner, st.relayed, st.polled, st.resumed
		out = append(out, cs)
	}
	for id, w := range s.withdrawn {
		if s.stores[id] == nil {
			out = append(out, ClusterStatus{ClusterIdentity: id, Resources: map[string]int{}, Rejected: []meshconfig.Rejection{}, Withdrawn: &w})
		}
	}
	for _, id := range expected {
		if s.isMissing(id) {
			at := s.started
			out = append(out, ClusterStatus{ClusterIdentity: id, Resources: map[string]int{}, Rejected: []meshconfig.Rejection{}, Missing: &at})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClusterIdentity.String() < out[j].ClusterIdentity.String() })
	return out
}
