package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"

	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/grpcserve"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// replicas is the hub's part in a replica set (hub/replica); the zero
// value (replicas off) hooks nothing into ingest.
type replicas struct {
	id      string
	cfg     hubconfig.Replicas
	metrics *replica.Metrics
	keyring *memberlist.Keyring
	relay   string // the relay address peers are told

	// members and relayer are set by start; ingest's hooks may run
	// before.
	members atomic.Pointer[replica.Membership]
	relayer atomic.Pointer[replica.Relayer]
	// proxies is the xds listener, tracked: its connections are the
	// replica's load and what the Balancer sheds.
	proxies *replica.TrackedListener
}

// track wraps the xds listener so that its connections are counted and
// can be shed.
func (r *replicas) track(lis net.Listener) net.Listener {
	r.proxies = replica.Track(lis)
	return r.proxies
}

// xdsServerOptions are the xds server's options of a replica: a stream
// interceptor that tells the tracked listener the home replica each
// proxy's node names (xdsbootstrap.MetaHomeReplica), which the Balancer
// sends it back to. None when replicas are off.
func (r *replicas) xdsServerOptions() []grpc.ServerOption {
	if r == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainStreamInterceptor(r.identify)}
}

// identify wraps an ADS stream so that its first request's node names
// the connection's home. An agent's name-table stream is left out: it
// dials xds.address, not its home, and is never sent home.
func (r *replicas) identify(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != discoveryv3.AggregatedDiscoveryService_StreamAggregatedResources_FullMethodName &&
		info.FullMethod != discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResources_FullMethodName {
		return handler(srv, ss)
	}
	p, ok := peer.FromContext(ss.Context())
	if !ok || p.Addr == nil || r.proxies == nil {
		return handler(srv, ss)
	}
	return handler(srv, &homedStream{ServerStream: ss, proxies: r.proxies, remote: p.Addr.String()})
}

// homedStream reads the home from the first request of a stream. Its
// RecvMsg is called from one goroutine, as gRPC requires.
type homedStream struct {
	grpc.ServerStream
	proxies *replica.TrackedListener
	remote  string
	seen    bool
}

func (s *homedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err != nil || s.seen {
		return err
	}
	s.seen = true
	req, ok := m.(interface {
		GetNode() *corev3.Node
		GetTypeUrl() string
	})
	if !ok || req.GetTypeUrl() == typeurl.NameTable {
		return nil
	}
	if home := req.GetNode().GetMetadata().GetFields()[xdsbootstrap.MetaHomeReplica].GetStringValue(); home != "" {
		s.proxies.Identify(s.remote, home)
	}
	return nil
}

// newReplicas checks what a replica needs before anything listens: its
// id, the gossip keyring and the address peers relay to. nil when
// replicas.join is empty.
func newReplicas(cfg hubconfig.Config, reg prometheus.Registerer) (*replicas, error) {
	rc := cfg.Replicas
	if !rc.Enabled() {
		return nil, nil
	}
	r := &replicas{id: rc.ID, cfg: rc, metrics: replica.NewMetrics(reg)}
	if r.id == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("replicas.id: empty, and the host name is unknown: %w", err)
		}
		r.id = strings.ToLower(strings.SplitN(h, ".", 2)[0])
	}
	if rc.KeyringFile != "" {
		kr, err := replica.LoadKeyring(rc.KeyringFile)
		if err != nil {
			return nil, fmt.Errorf("replicas.keyringFile: %w", err)
		}
		r.keyring = kr
	}
	host, port, _ := net.SplitHostPort(rc.RelayListen)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = rc.AdvertiseAddress
		if host == "" {
			host = rc.BindAddress
		}
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			priv, err := sockaddr.GetPrivateIP()
			if err != nil || priv == "" {
				return nil, fmt.Errorf("replicas.relayListen: %s listens on every address and no private address was found to tell peers: set replicas.advertiseAddress", rc.RelayListen)
			}
			host = priv
		}
	}
	r.relay = net.JoinHostPort(host, port)
	return r, nil
}

// replicaSet hooks the replica set into ingest: epochs, the withdrawal
// rule, telling peers of withdrawals and relaying changes; nil when
// replicas are off.
func (r *replicas) replicaSet() ingest.ReplicaSet {
	if r == nil {
		return nil
	}
	return ingest.ReplicaFuncs{
		ID: r.id,
		MayWithdrawFunc: func(id ingest.ClusterIdentity, owner string) bool {
			m := r.members.Load()
			return m != nil && m.MayWithdraw(id, owner)
		},
		WithdrawnFunc: func(id ingest.ClusterIdentity, epoch ingest.Epoch) {
			if m := r.members.Load(); m != nil {
				m.Withdrawn(id, epoch)
			}
		},
		ChangedFunc: func(id ingest.ClusterIdentity) {
			if rl := r.relayer.Load(); rl != nil {
				rl.Changed(id)
			}
		},
	}
}

// start serves the relay listener, joins the set and relays to its
// members until ctx ends.
func (r *replicas) start(ctx context.Context, cfg hubconfig.Config, sec *security, in *ingest.Ownership, store *ingest.Store,
	lis net.Listener, adm *admin.Server, log *slog.Logger, run func(func() error)) error {
	log = log.With("component", "replica", "replica", r.id)
	var (
		serverOpts []grpc.ServerOption
		dial       func(peer, addr string) (*grpc.ClientConn, error)
	)
	kp := grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true})
	size := grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(cfg.Spokes.MaxMessageBytes), grpc.MaxCallRecvMsgSize(cfg.Spokes.MaxMessageBytes))
	if sec.plaintext {
		log.Warn("INSECURE: tls.plaintext is set: the relay listener serves without TLS and believes the replica a caller names")
		dial = func(_, addr string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), kp, size)
		}
	} else {
		ident, err := replica.NewIdentity(ctx, sec.serving, r.id)
		if err != nil {
			return err
		}
		serverOpts = append(serverOpts, grpc.Creds(adm.Handshakes().Credentials("replicas.relayListen", credentials.NewTLS(ident.ServerConfig(r.metrics, log)))),
			grpc.ConnectionTimeout(cfg.TLS.HandshakeTimeout))
		dial = func(peer, addr string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(ident.ClientConfig(peer))), kp, size)
		}
	}
	srv := grpc.NewServer(append(serverOpts, grpc.MaxRecvMsgSize(cfg.Spokes.MaxMessageBytes), grpc.MaxSendMsgSize(cfg.Spokes.MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// A peer cut off is noticed within about 15 s: its relayed
		// clusters are then marked stale (never deleted).
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}))...)
	protocolv1.RegisterSyncServer(srv, replica.NewRelayServer(in, sec.plaintext, r.metrics, log))
	run(func() error {
		if err := grpcserve.Serve(ctx, srv, lis, 2*time.Second); err != nil {
			return fmt.Errorf("replicas.relayListen: %w", err)
		}
		return nil
	})

	var mu sync.Mutex
	var load replica.Load
	var loadAt time.Time
	relayer := replica.NewRelayer(replica.RelayerOptions{Self: r.id, In: in, Dial: dial, Metrics: r.metrics, Logger: log,
		// A stale cluster whose owner is gone (or restarted since) is
		// relayed by every replica holding it, so that one that joins
		// later gets it too (the same epoch from two replicas changes
		// nothing).
		Adopt: func(h ingest.Holding) bool {
			m := r.members.Load()
			return m != nil && m.Lost(h.Owner, h.Epoch)
		}})
	relayer.Start(ctx)
	r.relayer.Store(relayer)
	bindPort := r.cfg.BindPort
	members, err := replica.Join(replica.Options{
		ID: r.id, BindAddress: r.cfg.BindAddress, BindPort: bindPort, AdvertiseAddress: r.cfg.AdvertiseAddress,
		Join: r.cfg.Join, RejoinInterval: r.cfg.RejoinInterval, Keyring: r.keyring, Insecure: r.cfg.InsecureGossip,
		RelayAddress: r.relay, XDSAddress: cfg.XDS.Listen, SpokeAddress: r.cfg.SpokeAddress,
		Load: func() replica.Load {
			mu.Lock()
			defer mu.Unlock()
			if time.Since(loadAt) >= 5*time.Second {
				l := replica.Load{Proxies: r.proxies.Len(), Meshes: len(store.Meshes())}
				for _, h := range in.Holdings(ingest.HoldingFilter{}) {
					if !h.Relayed && h.Connected {
						l.Spokes++
					}
				}
				load, loadAt = l, time.Now()
			}
			return load
		},
		In:           in,
		OnPeer:       func(id, addr string) { go relayer.AddPeer(id, addr) },
		OnPeerGone:   func(id string) { go relayer.RemovePeer(id) },
		QuorumWindow: cfg.Ingest.StaleGracePeriod,
		ReadyTimeout: r.cfg.ReadyTimeout,
		Logger:       log,
		Metrics:      r.metrics,
	}, ctx.Done())
	if err != nil {
		return err
	}
	r.members.Store(members)
	bal := replica.NewBalancer(replica.BalancerOptions{Mine: r.proxies.Len, Peers: members.PeerProxies, Shed: r.proxies.CloseOldest,
		Self: r.id, Homes: r.proxies.Homes, ReadyPeers: members.ReadyPeers, ShedHome: r.proxies.CloseHomed,
		Rate: r.cfg.ShedRate, Tolerance: r.cfg.ShedTolerance, Logger: log, Metrics: r.metrics})
	go bal.Run(ctx.Done())
	spokes := replica.NewSpokeBalancer(replica.SpokeBalancerOptions{Self: r.id, In: in, Peers: members.SpokePeers,
		Rate: r.cfg.SpokeShedRate, MinAge: r.cfg.SpokeMinAge, Logger: log, Metrics: r.metrics})
	go spokes.Run(ctx.Done())
	adm.AddReadyCheck("replicas", members.Ready)
	adm.HandleDebug("replicas", "the replica set: members and their load, the leader and quorum, the owner and epoch of each cluster, relays to peers with bytes and lag, spoke balancing (spokes per replica, moves), proxy connections by the home replica they name", func(*http.Request) (any, error) {
		return r.debug(in, members, relayer, spokes), nil
	})
	log.Info("replica started", "gossip", net.JoinHostPort(r.cfg.BindAddress, strconv.Itoa(bindPort)), "relay", r.relay, "join", strings.Join(r.cfg.Join, ","), "encrypted", r.keyring != nil)
	return nil
}

// debug is /debug/replicas.
func (r *replicas) debug(in *ingest.Ownership, members *replica.Membership, relayer *replica.Relayer, spokes *replica.SpokeBalancer) any {
	type clusterView struct {
		ID        ingest.ClusterIdentity `json:"cluster"`
		Owner     string                 `json:"owner"`
		Epoch     ingest.Epoch           `json:"epoch"`
		Since     time.Time              `json:"since"`
		Relayed   bool                   `json:"relayed"`
		Connected bool                   `json:"connected"`
		Synced    bool                   `json:"synced"`
	}
	quorum, alive, known := members.Quorum()
	clusters := []clusterView{}
	for _, h := range in.Holdings(ingest.HoldingFilter{}) {
		clusters = append(clusters, clusterView{ID: h.ClusterIdentity, Owner: h.Owner, Epoch: h.Epoch, Since: h.Epoch.Time().UTC(), Relayed: h.Relayed, Connected: h.Connected, Synced: h.Synced})
	}
	ready := "ready"
	if err := members.Ready(); err != nil {
		ready = err.Error()
	}
	return map[string]any{
		"self":     r.id,
		"leader":   members.Leader(),
		"quorum":   map[string]any{"ok": quorum, "alive": alive, "known": known},
		"ready":    ready,
		"members":  members.Members(),
		"clusters": clusters,
		"relays":   relayer.Status(),
		"spokes":   spokes.Status(),
		// proxy connections by the home replica they name ("": none)
		"proxyHomes": r.proxies.Homes(),
	}
}
