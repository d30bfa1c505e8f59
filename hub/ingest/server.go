package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/grpcpeer"
	"github.com/navemesh/nave/shared/meshconfig"
)

// ServerOptions configure a Server. A plain value; Watch must be safe for
// concurrent use.
type ServerOptions struct {
	// Watch serves the Watch streams, once authenticated (see Watch); nil
	// answers them UNIMPLEMENTED.
	Watch WatchHandler
	// MaxMessageBytes is the largest message the streams' peers accept
	// (spokes.maxMessageBytes); a resume hint is split to stay under half
	// of it. 0: 16 MiB.
	MaxMessageBytes int
	// Limits gives a mesh's limits ingest enforces (0: none): the objects
	// of one kind the mesh may hold, all its clusters together (a new one
	// beyond it is refused in the message's NACK, naming the kind, the
	// count and the limit; what the mesh holds stays), and the clusters
	// it may hold (another cluster's stream is refused with
	// RESOURCE_EXHAUSTED naming the limit). nil: no limits. The Store's
	// LimitMetrics counts the refusals.
	Limits func(mesh string) (objectsPerKind, spokes int)
	Logger *slog.Logger
	// Registerer receives the stream metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Hosted reports whether the hub serves a mesh now; a peer replica's
	// relay of a cluster of any other (a mesh deleted, which the peer has
	// not yet learnt) is refused (Ownership.Relay). The spokes' own
	// streams are bounded by the Authenticator; Hosted is asked again once
	// a stream's record exists, so that none outlives a Store.WithdrawMesh
	// that raced with its start. Nil serves every mesh.
	Hosted func(mesh string) bool
}

// Server is the hub side of the Sync service: it authenticates each
// spoke's Push and Watch streams (Push, Poll, Watch, PollWatch), decodes
// and validates what a Push stream sends, writes it to the Store as that
// stream's cluster — and only that cluster — and answers each message with
// an ACK or a NACK naming every refused resource. It keeps no cluster
// state of its own.
//
// A Server is safe for concurrent use; each stream is served by its own
// goroutines, and never waits on anything but its stream and the Store's
// lock.
type Server struct {
	protocolv1.UnimplementedSyncServer

	store   *Store
	auth    Authenticator
	opts    ServerOptions
	log     *slog.Logger
	metrics *serverMetrics
}

// NewServer returns a Server that authenticates spokes with auth and
// holds their state in store.
func NewServer(store *Store, auth Authenticator, opts ServerOptions) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 16 << 20
	}
	return &Server{store: store, auth: auth, opts: opts, log: opts.Logger, metrics: newServerMetrics(opts.Registerer)}
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
	s.checkClaim(ctx, id)
	return id, suffix, nil
}

// checkClaim logs and counts, once per stream, a stream whose metadata
// claims another cluster than the one it authenticated as (otherClaim).
// The stream is served as authenticated.
func (s *Server) checkClaim(ctx context.Context, id ClusterIdentity) {
	claimed, other := otherClaim(ctx, id)
	if !other {
		return
	}
	s.metrics.claims.Inc()
	s.log.Warn("spoke stream claims another cluster than its certificate; served as its certificate says",
		"mesh", id.Mesh, "cluster", id.Cluster, "claimedMesh", claimed.Mesh, "claimedCluster", claimed.Cluster,
		"peer", grpcpeer.Addr(ctx))
}

// serve holds one stream of id's state until it ends.
func (s *Server) serve(stream protocolv1.Sync_PushServer, id ClusterIdentity, suffix string, o origin) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	_, spokes := s.limits(id.Mesh)
	ss, err := s.store.open(id, o, grpcpeer.Addr(stream.Context()), suffix, spokes, cancel)
	if le := (*limitError)(nil); errors.As(err, &le) {
		s.metrics.refused.Inc()
		s.log.Warn("spoke stream refused", "mesh", id.Mesh, "cluster", id.Cluster, "reason", err)
		return protocol.LimitError(err.Error())
	}
	if err != nil {
		s.log.Info("relayed stream refused", "mesh", id.Mesh, "cluster", id.Cluster, "owner", o.owner, "reason", err)
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	defer ss.close()
	if h := s.opts.Hosted; h != nil && !h(id.Mesh) {
		// The mesh stopped being served after the stream was
		// authenticated: Store.WithdrawMesh may have run before its
		// record existed. Once the record exists, a WithdrawMesh that
		// follows sees it.
		reason := fmt.Sprintf("mesh %q is not a mesh of this hub", id.Mesh)
		s.store.Withdraw(id, reason)
		return status.Error(codes.PermissionDenied, reason)
	}

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
			if c := (*cutOff)(nil); errors.As(cause, &c) {
				if !c.moved {
					return status.Error(codes.PermissionDenied, c.Error())
				}
				tr := metadata.Pairs(protocol.TrailerReconnect, "now")
				if c.redirect != "" {
					tr.Set(protocol.TrailerRedirect, c.redirect)
				}
				stream.SetTrailer(tr)
				return status.Error(codes.Unavailable, c.Error())
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
				for _, r := range s.resume(ss, kind, first, m) {
					if err := stream.Send(r); err != nil {
						return err
					}
				}
				first = false
				continue
			}
			first = false
			if err := stream.Send(s.apply(ss, m)); err != nil {
				return err
			}
		}
	}
}

// apply decodes one message, stores it and returns its ACK or NACK.
func (s *Server) apply(ss *session, m *discoveryv3.DeltaDiscoveryResponse) *discoveryv3.DeltaDiscoveryRequest {
	id := ss.id
	reply := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: m.GetTypeUrl(), ResponseNonce: m.GetNonce()}
	if m.GetNonce() == "" {
		return s.nack(id, reply, "message has no nonce", nil)
	}
	if m.GetTypeUrl() == protocol.SyncedTypeURL {
		if !ss.synced() {
			return s.nack(id, reply, "stream superseded", nil)
		}
		s.metrics.messages.WithLabelValues("ack").Inc()
		return reply
	}
	kind, ok := meshconfig.KindByTypeURL(m.GetTypeUrl())
	if !ok {
		if !ss.refuse() {
			return s.nack(id, reply, "stream superseded", nil)
		}
		return s.nack(id, reply, fmt.Sprintf("unknown type URL %q", m.GetTypeUrl()), nil)
	}
	updates := make([]update, 0, len(m.GetResources()))
	var rejections []*protocolv1.Rejection
	for _, r := range m.GetResources() {
		o, err := protocol.DecodeKind(kind, r)
		if err != nil {
			var de *protocol.DecodeError
			reason := err.Error()
			if errors.As(err, &de) {
				reason = de.Reason
			}
			rejections = append(rejections, &protocolv1.Rejection{TypeUrl: m.GetTypeUrl(), Name: r.GetName(), Reason: reason})
			updates = append(updates, update{name: r.GetName(), reason: reason})
			continue
		}
		updates = append(updates, update{name: r.GetName(), obj: o})
	}
	objects, _ := s.limits(id.Mesh)
	refused, current := ss.apply(kind, updates, m.GetRemovedResources(), objects)
	if !current {
		return s.nack(id, reply, "stream superseded", nil)
	}
	for _, u := range refused {
		rejections = append(rejections, &protocolv1.Rejection{TypeUrl: m.GetTypeUrl(), Name: u.name, Reason: u.reason})
	}
	if len(rejections) > 0 {
		return s.nack(id, reply, "", rejections)
	}
	s.metrics.messages.WithLabelValues("ack").Inc()
	return reply
}

// limits returns mesh's limits (ServerOptions.Limits; 0: none).
func (s *Server) limits(mesh string) (objectsPerKind, spokes int) {
	if s.opts.Limits == nil {
		return 0, 0
	}
	return s.opts.Limits(mesh)
}

// nack makes reply a NACK: msg, or, if empty, the rejections
// (protocol.RejectionStatus).
func (s *Server) nack(id ClusterIdentity, reply *discoveryv3.DeltaDiscoveryRequest, msg string, rejections []*protocolv1.Rejection) *discoveryv3.DeltaDiscoveryRequest {
	s.metrics.messages.WithLabelValues("nack").Inc()
	s.metrics.rejected.Add(float64(len(rejections)))
	st := &statuspb.Status{Code: int32(codes.InvalidArgument), Message: msg}
	if msg == "" {
		st = protocol.RejectionStatus(rejections)
	}
	reply.ErrorDetail = st
	s.log.Warn("spoke message rejected", "mesh", id.Mesh, "cluster", id.Cluster, "type", reply.GetTypeUrl(), "nonce", reply.GetResponseNonce(), "reason", st.GetMessage())
	return reply
}
