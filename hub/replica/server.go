package replica

import (
	"context"
	"errors"
	"log/slog"
	"regexp"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// gRPC metadata of a relay stream, on top of the Push protocol's own
// (protocol.MetadataMesh, MetadataCluster, MetadataDomainSuffix): the
// cluster's owner and ownership epoch, and, without TLS, the relaying
// replica's id.
const (
	MetadataOwner   = "x-nave-relay-owner"
	MetadataEpoch   = "x-nave-relay-epoch"
	MetadataReplica = "x-nave-relay-replica"
)

var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// RelayServer serves the relay listener: the Sync service's Push, on which
// a peer replica relays one cluster's state (Relayer). The cluster is named
// in the stream's metadata, which is believed because the caller proved to
// be a replica: its client certificate is a replica's, issued by the
// hub's serving CA (Identity.ServerConfig has checked the chain; this
// checks it again). It is safe for concurrent use.
type RelayServer struct {
	protocolv1.UnimplementedSyncServer
	in        Ingest
	plaintext bool
	metrics   *Metrics
	log       *slog.Logger
}

// NewRelayServer serves relays into in; plaintext trusts the replica id a
// caller names (the hub's tls.plaintext mode).
func NewRelayServer(in Ingest, plaintext bool, m *Metrics, log *slog.Logger) *RelayServer {
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RelayServer{in: in, plaintext: plaintext, metrics: m, log: log}
}

// Push serves one relayed cluster stream.
func (r *RelayServer) Push(stream protocolv1.Sync_PushServer) error {
	from, id, owner, epoch, err := r.authorize(stream.Context())
	if err != nil {
		r.metrics.refused.Inc()
		r.log.Warn("relay stream refused", "reason", err)
		return err
	}
	if err := r.in.Relay(stream, id, owner, epoch); err != nil {
		if status.Code(err) == codes.FailedPrecondition {
			r.metrics.refused.Inc()
		}
		r.log.Debug("relay stream ended", "from", from, "mesh", id.Mesh, "cluster", id.Cluster, "err", err)
		return err
	}
	return nil
}

func (r *RelayServer) authorize(ctx context.Context) (from string, id ingest.ClusterIdentity, owner string, epoch ingest.Epoch, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	one := func(key string) (string, error) {
		vs := md.Get(key)
		if len(vs) != 1 {
			return "", status.Errorf(codes.InvalidArgument, "metadata %s: want exactly one value, got %d", key, len(vs))
		}
		return vs[0], nil
	}
	if r.plaintext {
		if from, err = one(MetadataReplica); err != nil {
			return
		}
	} else {
		p, ok := grpcpeer.FromContext(ctx)
		ti, tok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || !tok {
			err = status.Error(codes.Unauthenticated, "the relay takes only TLS connections of replicas")
			return
		}
		if from, err = verifyReplicaConn(ti); err != nil {
			err = status.Error(codes.PermissionDenied, err.Error())
			return
		}
	}
	if !labelRE.MatchString(from) {
		err = status.Errorf(codes.InvalidArgument, "replica id %q is not a DNS label", from)
		return
	}
	var s string
	if s, err = one(MetadataEpoch); err != nil {
		return
	}
	if epoch, err = ingest.ParseEpoch(s); err != nil {
		err = status.Error(codes.InvalidArgument, err.Error())
		return
	}
	if owner, err = one(MetadataOwner); err != nil {
		return
	}
	for key, dst := range map[string]*string{protocol.MetadataMesh: &id.Mesh, protocol.MetadataCluster: &id.Cluster} {
		if *dst, err = one(key); err != nil {
			return
		}
		if !labelRE.MatchString(*dst) {
			err = status.Errorf(codes.InvalidArgument, "metadata %s: %q is not a DNS label", key, *dst)
			return
		}
	}
	return
}

// verifyReplicaConn returns the replica id of a TLS peer whose chain the
// handshake verified (Identity.ServerConfig).
func verifyReplicaConn(ti credentials.TLSInfo) (string, error) {
	if len(ti.State.PeerCertificates) == 0 {
		return "", errors.New("no client certificate: the relay takes only replicas")
	}
	return replicaOf(ti.State.PeerCertificates[0].URIs)
}
