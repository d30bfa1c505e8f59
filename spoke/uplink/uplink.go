// Package uplink keeps the hub in sync with a spoke's desired state: it
// dials the hub (the spoke only ever dials out), sends the full state on
// every (re)connect — or, when the hub says what it already holds of the
// cluster (Resume), only the difference — followed by the synced marker,
// then deltas, and tracks the hub's ACK/NACK of every nonce. Lost connections are retried with
// jittered exponential backoff that never waits more than its maximum, each
// attempt on a new connection — except a move: a hub replica balancing
// spokes closes a synced stream with protocol.TrailerReconnect, and the
// spoke reconnects at once, to the replica protocol.TrailerRedirect names
// first.
package uplink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/retry"
	"github.com/navemesh/nave/spoke/remote"
)

// Options configure an Uplink.
type Options struct {
	// Address is the hub's (push mode), or, with Polled, the address the
	// spoke serves Poll on (shown in Status only).
	Address string
	// Polled: the hub dials the spoke (hub.mode polled): Run is not
	// called; the spoke's gRPC server calls Poll for each stream.
	Polled bool
	// Mesh and Cluster are sent in the stream's metadata: the identity
	// of a plaintext spoke; a hub that authenticates the spoke's
	// certificate ignores them.
	Mesh, Cluster string
	// DomainSuffix is the cluster's DNS suffix, sent in the stream's
	// metadata so that the hub completes the cluster's short host names
	// with it; empty sends none (the hub assumes cluster.local).
	DomainSuffix string
	// TLS secures the connection to the hub; every (re)connection
	// handshakes with it, so a GetClientCertificate callback (the
	// enrollment Renewer's) presents its newest certificate. nil
	// connects without TLS (insecure: tests and development).
	TLS             *tls.Config
	BackoffInitial  time.Duration
	BackoffMax      time.Duration
	MaxMessageBytes int
	// View, if set, is kept up to date from a Watch stream opened beside
	// every Push stream (the rest of the mesh, for fallback), and saved to
	// ViewFile (if set) once complete and after changes.
	View     *remote.View
	ViewFile string
	// NoRemoteConfig has the Watch stream subscribe to the mesh's
	// MeshConfig and this cluster's Gateway API statuses alone (a spoke
	// that keeps no fallback: the rest of the mesh would only cost
	// memory).
	NoRemoteConfig bool
	// OnSynced, if set, is called each time a Push stream reaches synced
	// (the hub holds the desired state) and each time the Watch stream's
	// view is complete and saved, before the state says so, on the
	// stream's goroutine: the end of a start or of a reconnection, when
	// what only that used can be let go.
	OnSynced   func()
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Uplink pushes the desired state to the hub. Update and Status are safe
// for concurrent use; Run is called once.
type Uplink struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	desired map[key]*meshconfig.Object
	// first is closed by the first Update: no stream opens before the
	// source's initial state is complete, or the hub would prune the
	// cluster down to an empty state at the synced marker.
	first     chan struct{}
	firstOnce sync.Once
	changed   chan struct{} // capacity 1
	state     string
	lastErr   string
	since     time.Time
	nacked    map[key]nack
	// acked is what the hub has confirmed on the current stream.
	acked    map[key]string
	sessions int
	// poll is the Poll stream being served (Options.Polled).
	poll *poll
	// target is the address of the current (or last) stream; moves
	// counts the streams the hub closed to move the spoke.
	target string
	moves  int
	// fullNext is set after a resume hint that did not parse: the next
	// stream sends the full state without asking to resume.
	fullNext bool
	// resumed is set when the current (or last) stream resumed.
	resumed bool
	// watchState and watchErr describe the Watch stream.
	watchState, watchErr string
	// refusedTypes are the optional types (optionalTypes) the hub refused
	// a subscription to (a hub older than the type): Watch streams then
	// leave them out. Reset at each new connection (watchLoop).
	refusedTypes []string
}

type key struct{ typeURL, name string }

type nack struct {
	Reason string
	At     time.Time
}

// Connection states shown at the debug endpoint.
const (
	StateWaiting    = "waiting-for-source"
	StateConnecting = "connecting"
	StateSyncing    = "syncing"
	StateSynced     = "synced"
	StateBackoff    = "backoff"
)

// New returns an Uplink; nothing is dialed before Run.
func New(opts Options) *Uplink {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	state := StateWaiting
	if opts.Polled {
		state = StateWaitingHub
	}
	return &Uplink{
		opts: opts, log: opts.Logger, metrics: newMetrics(opts.Registerer),
		desired: map[key]*meshconfig.Object{}, changed: make(chan struct{}, 1), first: make(chan struct{}),
		state: state, since: time.Now(), nacked: map[key]nack{}, acked: map[key]string{}, watchState: WatchOff,
	}
}

// Update replaces the desired state with objs: the complete state of the
// source. The first call allows Run to connect. It never blocks.
func (u *Uplink) Update(objs []*meshconfig.Object) {
	desired := make(map[key]*meshconfig.Object, len(objs))
	for _, o := range objs {
		desired[key{o.Kind.TypeURL, o.Key()}] = o
	}
	u.mu.Lock()
	u.desired = desired
	u.mu.Unlock()
	u.firstOnce.Do(func() { close(u.first) })
	select {
	case u.changed <- struct{}{}:
	default:
	}
}

// Run connects once the source has published its initial state, and keeps
// the hub in sync until ctx is done.
func (u *Uplink) Run(ctx context.Context) error {
	u.setState(StateWaiting, nil)
	select {
	case <-ctx.Done():
		return nil
	case <-u.first:
	}
	creds, redirectCreds := insecure.NewCredentials(), insecure.NewCredentials()
	if u.opts.TLS != nil {
		creds = credentials.NewTLS(u.opts.TLS)
		// A replica a move names is still authenticated by the name of
		// Address (its certificate is the hub's), whatever its own host.
		rc := u.opts.TLS.Clone()
		if rc.ServerName == "" {
			rc.ServerName, _, _ = net.SplitHostPort(u.opts.Address)
		}
		redirectCreds = credentials.NewTLS(rc)
	}
	dialOpts := []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(u.opts.MaxMessageBytes), grpc.MaxCallSendMsgSize(u.opts.MaxMessageBytes)),
	}

	b := retry.New(u.opts.BackoffInitial, u.opts.BackoffMax)
	// redirect is the hub replica a move named, tried once before
	// Address.
	var redirect string
	for {
		// Each attempt dials afresh: a ClientConn that failed to connect
		// keeps failing calls with its cached error until its own
		// reconnect backoff (1 s growing to 2 min) lets it try again, so a
		// hub that came back would be found late. NewClient fails only on
		// a malformed target or options, which no retry mends.
		target, opts := u.opts.Address, append(slices.Clip(dialOpts), grpc.WithTransportCredentials(creds))
		if redirect != "" {
			target, opts = redirect, append(slices.Clip(dialOpts), grpc.WithTransportCredentials(redirectCreds))
			redirect = ""
		}
		u.mu.Lock()
		u.target = target
		u.mu.Unlock()
		conn, err := grpc.NewClient(target, opts...)
		if err != nil {
			if target != u.opts.Address {
				u.log.Warn("hub redirect not usable; reconnecting through the hub address", "redirect", target, "err", err)
				continue
			}
			return fmt.Errorf("hub address %q: %w", u.opts.Address, err)
		}
		client := protocolv1.NewSyncClient(conn)
		wctx, wcancel := context.WithCancel(ctx)
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			if u.opts.View != nil {
				u.watchLoop(wctx, client)
			}
		}()
		synced, err := u.session(ctx, client)
		wcancel()
		<-watchDone
		conn.Close()
		if ctx.Err() != nil {
			return nil
		}
		if synced {
			b.Reset() // a stream that got as far as synced was healthy
		}
		if mv := (*movedError)(nil); errors.As(err, &mv) {
			// The hub balances spokes across its replicas: reconnect to
			// the replica it named first, at once if the stream had
			// synced (a hub moves only synced spokes; anything else
			// backs off, so no hub can make the spoke spin).
			redirect = mv.redirect
			u.metrics.moves.Inc()
			u.mu.Lock()
			u.moves++
			u.mu.Unlock()
			u.log.Info("hub asked this spoke to reconnect to another replica", "from", target, "redirect", redirect, "reason", status.Convert(mv.err).Message())
			if synced {
				u.setState(StateConnecting, err)
				continue
			}
		}
		wait := b.NextBackOff()
		u.setState(StateBackoff, err)
		u.metrics.reconnects.Inc()
		u.log.Warn("hub stream lost; retrying", "address", u.opts.Address, "in", wait.Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (u *Uplink) setState(s string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.state != s {
		u.since = time.Now()
	}
	u.state = s
	if err != nil {
		u.lastErr = err.Error()
	}
	u.metrics.setState(s)
}

// session dials one Push stream and runs it. It reports whether the
// stream reached synced.
func (u *Uplink) session(ctx context.Context, client protocolv1.SyncClient) (synced bool, err error) {
	u.setState(StateConnecting, nil)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Push(metadata.NewOutgoingContext(ctx, u.streamMetadata()), grpc.WaitForReady(false))
	if err != nil {
		return false, err
	}
	synced, err = u.run(ctx, stream)
	if ctx.Err() != nil {
		_ = stream.CloseSend()
	}
	return synced, err
}

// streamMetadata names the spoke's stream: its claimed mesh and cluster
// (believed only by a plaintext hub), the protocol version and the
// cluster's domain suffix. Push sends it as request metadata, Poll as
// response header.
func (u *Uplink) streamMetadata() metadata.MD {
	md := metadata.Pairs(protocol.MetadataMesh, u.opts.Mesh, protocol.MetadataCluster, u.opts.Cluster, protocol.MetadataProtocol, protocol.Version)
	if u.opts.DomainSuffix != "" {
		md.Set(protocol.MetadataDomainSuffix, u.opts.DomainSuffix)
	}
	return md
}

// stream is the spoke's end of a sync stream, whoever dialled: a Push
// client stream (protocolv1.Sync_PushClient) or a Poll server stream
// (protocolv1.Polled_PollServer) carry the same messages.
type stream interface {
	Send(*discoveryv3.DeltaDiscoveryResponse) error
	Recv() (*discoveryv3.DeltaDiscoveryRequest, error)
}

// run holds one stream open until it fails or ctx ends: the full state,
// the synced marker, then deltas, recording the hub's answers. It reports
// whether the stream reached synced.
func (u *Uplink) run(ctx context.Context, stream stream) (synced bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &session{u: u, stream: stream, sent: map[key]string{}, inflight: map[string]inflight{}}
	u.mu.Lock()
	u.acked = map[key]string{}
	u.sessions++
	u.mu.Unlock()

	replies := make(chan *discoveryv3.DeltaDiscoveryRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case replies <- r:
			case <-ctx.Done():
				return
			}
		}
	}()

	u.setState(StateSyncing, nil)
	if err := s.resume(ctx, replies, recvErr); err != nil {
		return false, err
	}
	if err := s.sendDiff(); err != nil {
		return false, err
	}
	syncNonce, err := s.send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL}, nil)
	if err != nil {
		return false, err
	}
	for {
		select {
		case <-ctx.Done():
			return synced, ctx.Err()
		case err := <-recvErr:
			// A Push stream's trailer may ask the spoke to move to another
			// hub replica; a Poll stream has none (the hub dials).
			if ts, ok := stream.(interface{ Trailer() metadata.MD }); ok && status.Code(err) == codes.Unavailable {
				if tr := ts.Trailer(); len(tr.Get(protocol.TrailerReconnect)) > 0 {
					var redirect string
					if r := tr.Get(protocol.TrailerRedirect); len(r) == 1 && validHostPort(r[0]) {
						redirect = r[0]
					}
					return synced, &movedError{err: err, redirect: redirect}
				}
			}
			return synced, err
		case r := <-replies:
			if r.GetResponseNonce() == syncNonce && r.GetErrorDetail() == nil && !synced {
				synced = true
				if u.opts.OnSynced != nil {
					u.opts.OnSynced()
				}
				u.setState(StateSynced, nil)
				u.log.Info("hub synced", "hub", u.hubName(), "resources", len(s.sent))
			}
			s.reply(r)
		case <-u.changed:
			if err := s.sendDiff(); err != nil {
				return synced, err
			}
		}
	}
}

// resume asks the hub what it holds of the cluster (protocol.ResumeTypeURL,
// the stream's first message) and, if it says, makes that what this stream
// has sent: sendDiff then sends only what differs, and explicit removals
// for what the hub holds that the spoke no longer has (a resumed hub
// prunes nothing at the synced marker). A hub that refuses (an older one,
// or one without a complete state of the cluster) gets the full state. A
// hint that does not parse ends the stream, and the next one sends the
// full state without asking.
func (s *session) resume(ctx context.Context, replies <-chan *discoveryv3.DeltaDiscoveryRequest, recvErr <-chan error) error {
	s.u.mu.Lock()
	full := s.u.fullNext
	s.u.fullNext, s.u.resumed = false, false
	s.u.mu.Unlock()
	if full {
		return nil
	}
	// The hub names only the types it holds differently from this
	// snapshot's digests.
	s.u.mu.Lock()
	mine := protocol.Held{}
	for k, o := range s.u.desired {
		if mine[k.typeURL] == nil {
			mine[k.typeURL] = map[string]string{}
		}
		mine[k.typeURL][k.name] = o.Version
	}
	s.u.mu.Unlock()
	nonce, err := s.send(protocol.ResumeMessage(mine), nil)
	if err != nil {
		return err
	}
	delete(s.inflight, nonce) // answered here, not by reply
	held, resumed, err := protocol.ReadResume(func() (*discoveryv3.DeltaDiscoveryRequest, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-recvErr:
			return nil, err
		case r := <-replies:
			return r, nil
		}
	}, nonce, mine)
	if err != nil {
		// A hint that does not parse, or that exceeds this spoke's
		// hub.maxMessageBytes (a hub with a larger limit), would fail
		// every resume alike: the next stream does not ask.
		// A stream the hub refused for its mesh's limits is no bad hint.
		if he := (*protocol.HintError)(nil); errors.As(err, &he) || status.Code(err) == codes.ResourceExhausted && !protocol.IsLimitError(err) {
			s.u.mu.Lock()
			s.u.fullNext = true
			s.u.mu.Unlock()
			s.u.metrics.resumes.WithLabelValues("bad-hint").Inc()
			return fmt.Errorf("hub's resume hint refused: %w", err)
		}
		return err
	}
	if !resumed {
		s.u.metrics.resumes.WithLabelValues("full").Inc()
		return nil
	}
	s.u.mu.Lock()
	s.u.resumed = true
	for t, byName := range held {
		for n, v := range byName {
			s.sent[key{t, n}] = v
			s.u.acked[key{t, n}] = v
		}
	}
	s.u.mu.Unlock()
	s.u.metrics.resumes.WithLabelValues("resumed").Inc()
	s.u.log.Info("hub stream resumed", "hub", s.u.hubName(), "held", held.Count())
	return nil
}

// movedError is a stream the hub closed to move the spoke to another
// replica (protocol.TrailerReconnect), naming the replica to try first.
type movedError struct {
	err      error
	redirect string
}

func (e *movedError) Error() string { return e.err.Error() }
func (e *movedError) Unwrap() error { return e.err }

// validHostPort reports whether s is a host:port a redirect may name.
func validHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536
}

type inflight struct {
	typeURL string
	names   map[string]string // name -> version; "" for a removal
	sentAt  time.Time
}

type session struct {
	u        *Uplink
	stream   stream
	nonce    uint64
	sent     map[key]string // what this stream has sent: key -> version
	inflight map[string]inflight
}

// messageTarget is the size a message of the uplink grows to at most
// (half the size limit when that is less): a message's resources are
// encoded, held and marshalled whole, and a spoke's initial state of
// 10,000 Workloads in one message was ~10 MB at once at its peak.
const messageTarget = 1 << 20

// sendDiff sends what differs between the desired state and what this
// stream has sent, one message (or more, to respect the size target) per
// type, in a stable order.
func (s *session) sendDiff() error {
	s.u.mu.Lock()
	desired := s.u.desired
	s.u.mu.Unlock()

	upserts := map[string][]*meshconfig.Object{}
	removals := map[string][]string{}
	for k, o := range desired {
		if s.sent[k] != o.Version {
			upserts[k.typeURL] = append(upserts[k.typeURL], o)
		}
	}
	for k := range s.sent {
		if _, ok := desired[k]; !ok {
			removals[k.typeURL] = append(removals[k.typeURL], k.name)
		}
	}
	types := map[string]bool{}
	for t := range upserts {
		types[t] = true
	}
	for t := range removals {
		types[t] = true
	}
	order := make([]string, 0, len(types))
	for t := range types {
		order = append(order, t)
	}
	sort.Strings(order)
	budget := min(s.u.opts.MaxMessageBytes/2, messageTarget)
	for _, t := range order {
		objs := upserts[t]
		sort.Slice(objs, func(i, j int) bool { return objs[i].Key() < objs[j].Key() })
		msg := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: t, RemovedResources: removals[t]}
		sort.Strings(msg.RemovedResources)
		size := 0
		for _, o := range objs {
			r, err := protocol.Encode(o)
			if err != nil {
				s.u.log.Error("resource not sent", "kind", o.Kind.Kind, "name", o.Key(), "err", err)
				continue
			}
			n := proto.Size(r)
			if size > 0 && size+n > budget {
				if err := s.sendTracked(msg); err != nil {
					return err
				}
				msg, size = &discoveryv3.DeltaDiscoveryResponse{TypeUrl: t}, 0
			}
			msg.Resources = append(msg.Resources, r)
			size += n
		}
		if err := s.sendTracked(msg); err != nil {
			return err
		}
	}
	return nil
}

func (s *session) sendTracked(msg *discoveryv3.DeltaDiscoveryResponse) error {
	if len(msg.Resources) == 0 && len(msg.RemovedResources) == 0 {
		return nil
	}
	names := map[string]string{}
	for _, r := range msg.Resources {
		names[r.GetName()] = r.GetVersion()
	}
	for _, n := range msg.RemovedResources {
		names[n] = ""
	}
	_, err := s.send(msg, names)
	return err
}

func (s *session) send(msg *discoveryv3.DeltaDiscoveryResponse, names map[string]string) (string, error) {
	s.nonce++
	msg.Nonce = strconv.FormatUint(s.nonce, 10)
	msg.SystemVersionInfo = protocol.Version
	if err := s.stream.Send(msg); err != nil {
		return "", err
	}
	for n, v := range names {
		k := key{msg.TypeUrl, n}
		if v == "" {
			delete(s.sent, k)
		} else {
			s.sent[k] = v
		}
	}
	s.inflight[msg.Nonce] = inflight{typeURL: msg.TypeUrl, names: names, sentAt: time.Now()}
	s.u.metrics.messages.Inc()
	s.u.metrics.resources.Add(float64(len(names)))
	s.u.metrics.bytes.Add(float64(proto.Size(msg)))
	return msg.Nonce, nil
}

// reply records the hub's answer to one nonce.
func (s *session) reply(r *discoveryv3.DeltaDiscoveryRequest) {
	in, ok := s.inflight[r.GetResponseNonce()]
	if !ok {
		s.u.log.Warn("hub answered an unknown nonce", "nonce", r.GetResponseNonce())
		return
	}
	delete(s.inflight, r.GetResponseNonce())
	s.u.metrics.ackLatency.Observe(time.Since(in.sentAt).Seconds())
	rejected := map[string]string{}
	for _, rj := range protocol.Rejections(r) {
		rejected[rj.GetName()] = rj.GetReason()
	}
	if r.GetErrorDetail() != nil && len(rejected) == 0 {
		// The whole message was refused.
		for n := range in.names {
			rejected[n] = r.GetErrorDetail().GetMessage()
		}
		if in.typeURL == protocol.SyncedTypeURL {
			s.u.log.Error("hub refused the synced marker", "reason", r.GetErrorDetail().GetMessage())
		}
	}
	now := time.Now()
	s.u.mu.Lock()
	defer s.u.mu.Unlock()
	for n, v := range in.names {
		k := key{in.typeURL, n}
		if reason, bad := rejected[n]; bad {
			s.u.nacked[k] = nack{Reason: reason, At: now}
			continue
		}
		delete(s.u.nacked, k)
		if v == "" {
			delete(s.u.acked, k)
		} else {
			s.u.acked[k] = v
		}
	}
	if len(rejected) > 0 {
		s.u.metrics.nacks.Inc()
		s.u.log.Warn("hub rejected resources", "count", len(rejected), "reason", r.GetErrorDetail().GetMessage())
	}
}

// Status is what the spoke's /debug/uplink shows.
type Status struct {
	// Mode is push (the spoke dials Address) or polled (the hub dials the
	// spoke at Address; PolledBy names the hub holding the stream).
	Mode     string `json:"mode"`
	Address  string `json:"address"`
	PolledBy string `json:"polledBy,omitempty"`
	// PolledSince is when the current Poll stream opened.
	PolledSince *time.Time `json:"polledSince,omitempty"`
	Mesh        string     `json:"mesh"`
	Cluster     string     `json:"cluster"`
	TLS         bool       `json:"tls"`
	State       string     `json:"state"`
	Since       time.Time  `json:"since"`
	LastErr     string     `json:"lastError,omitempty"`
	Sessions    int        `json:"sessions"`
	// Target is the address of the current (or last) stream: Address, or
	// the replica a move named; Moves counts the streams the hub closed
	// to move this spoke to another replica.
	Target string `json:"target,omitempty"`
	Moves  int    `json:"moves,omitempty"`
	// Resumed is set when the current (or last) stream resumed: the hub
	// said what it held and the spoke sent only what differed.
	Resumed bool          `json:"resumed,omitempty"`
	Desired int           `json:"desired"`
	Acked   int           `json:"acked"`
	Nacked  []NackedEntry `json:"nacked"`
	// Watch is the Watch stream's state (off without a remote view).
	Watch        string `json:"watch"`
	WatchLastErr string `json:"watchLastError,omitempty"`
}

// NackedEntry is a resource the hub refused.
type NackedEntry struct {
	Kind   string    `json:"kind"`
	Name   string    `json:"name"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Status reports the uplink's state.
func (u *Uplink) Status() Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := Status{Address: u.opts.Address, Mesh: u.opts.Mesh, Cluster: u.opts.Cluster, TLS: u.opts.TLS != nil, State: u.state, Since: u.since,
		LastErr: u.lastErr, Sessions: u.sessions, Target: u.target, Moves: u.moves, Resumed: u.resumed, Desired: len(u.desired), Acked: len(u.acked), Nacked: []NackedEntry{},
		Watch: u.watchState, WatchLastErr: u.watchErr, Mode: "push"}
	if u.opts.Polled {
		st.Mode = "polled"
		if u.poll != nil {
			since := u.poll.since
			st.PolledBy, st.PolledSince = u.poll.by, &since
		}
	}
	for k, n := range u.nacked {
		kind := k.typeURL
		if kd, ok := meshconfig.KindByTypeURL(k.typeURL); ok {
			kind = kd.Kind
		}
		st.Nacked = append(st.Nacked, NackedEntry{Kind: kind, Name: k.name, Reason: n.Reason, At: n.At})
	}
	sort.Slice(st.Nacked, func(i, j int) bool { return st.Nacked[i].Kind+st.Nacked[i].Name < st.Nacked[j].Kind+st.Nacked[j].Name })
	return st
}

// Synced reports whether the current stream has reached synced.
func (u *Uplink) Synced() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.state != StateSynced {
		return errors.New("hub uplink is " + u.state)
	}
	return nil
}
