package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/retry"
)

// RelayerOptions configure a Relayer.
type RelayerOptions struct {
	// Self is this replica's id.
	Self string
	// In is the local ingest: what is relayed is what it holds.
	In Ingest
	// Dial opens a connection to the relay listener of replica peer at
	// addr (mTLS with Identity.ClientConfig(peer)).
	Dial func(peer, addr string) (*grpc.ClientConn, error)
	// Adopt, if set, says whether this replica relays a stale cluster it
	// does not own: one whose owner is gone, so that a replica that joins
	// later holds it too.
	Adopt func(h ingest.Holding) bool
	// BatchSize bounds the resources of one relay message; 0 means 500.
	BatchSize int
	Metrics   *Metrics
	Logger    *slog.Logger
}

// Relayer sends the state of this replica's spokes to every peer: one
// Push stream per (peer, cluster), carrying the cluster's owner and epoch
// in its metadata, the cluster's applied state then the synced marker, then
// every change the owner applies; the stream ends when the spoke's stream
// has ended (the peer then keeps the cluster as stale) and a new one starts
// with each new epoch. What it sends is what the owner's ingest applied —
// never what a spoke has staged — so a peer prunes only what the owner
// pruned. It is safe for concurrent use.
type Relayer struct {
	opts RelayerOptions
	log  *slog.Logger

	mu     sync.Mutex
	links  map[string]*link
	owners map[ingest.ClusterIdentity]string
	ctx    context.Context
}

// link is the relay to one peer.
type link struct {
	peer, addr string
	conn       *grpc.ClientConn
	cancel     context.CancelFunc
	ctx        context.Context
	relays     map[ingest.ClusterIdentity]*relay
	// done is the epoch of each disconnected cluster relayed in full to
	// the peer (or refused by it as older than its own): nothing more to
	// send until the epoch changes.
	done map[ingest.ClusterIdentity]ingest.Epoch
}

// relay is one (peer, cluster) stream's goroutine and its figures.
type relay struct {
	wake chan struct{}

	mu       sync.Mutex
	stats    RelayStatus
	changeAt time.Time
	// fullNext is set after a peer's resume hint did not parse: the next
	// stream sends the full state without asking to resume.
	fullNext bool
}

// RelayStatus is one (peer, cluster) relay as /debug/replicas shows it.
// A plain value.
type RelayStatus struct {
	Peer      string                 `json:"peer"`
	Cluster   ingest.ClusterIdentity `json:"cluster"`
	Epoch     ingest.Epoch           `json:"epoch"`
	State     string                 `json:"state"`
	Messages  uint64                 `json:"messages"`
	Bytes     uint64                 `json:"bytes"`
	Acked     uint64                 `json:"acked"`
	Nacked    uint64                 `json:"nacked"`
	LastAckAt time.Time              `json:"lastAckAt,omitzero"`
	// Lag is the last change's time from the owner's ingest to the
	// peer's acknowledgement.
	Lag       string `json:"lag,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// Resumed is set when the current (or last) stream resumed: the peer
	// said what it held of the cluster, and only what differed was sent.
	Resumed bool `json:"resumed,omitempty"`
}

// NewRelayer returns a Relayer; Start it.
func NewRelayer(opts RelayerOptions) *Relayer {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 500
	}
	return &Relayer{opts: opts, log: opts.Logger, links: map[string]*link{}, owners: map[ingest.ClusterIdentity]string{}, ctx: context.Background()}
}

// Start runs the Relayer until ctx ends: it then closes every relay.
func (r *Relayer) Start(ctx context.Context) {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	go func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				r.mu.Lock()
				for id, l := range r.links {
					l.close()
					delete(r.links, id)
				}
				r.mu.Unlock()
				return
			case <-tick.C:
				r.sweep()
			}
		}
	}()
}

// AddPeer starts relaying to peer at addr (again, if its address changed).
func (r *Relayer) AddPeer(peer, addr string) {
	if peer == r.opts.Self || addr == "" {
		return
	}
	conn, err := r.opts.Dial(peer, addr)
	if err != nil {
		r.log.Error("relay to a peer not possible", "peer", peer, "relay", addr, "err", err)
		return
	}
	r.mu.Lock()
	if r.ctx.Err() != nil {
		// Stopped: no link would ever be closed.
		r.mu.Unlock()
		_ = conn.Close()
		return
	}
	if old := r.links[peer]; old != nil {
		old.close()
	}
	ctx, cancel := context.WithCancel(r.ctx)
	l := &link{peer: peer, addr: addr, conn: conn, ctx: ctx, cancel: cancel, relays: map[ingest.ClusterIdentity]*relay{}, done: map[ingest.ClusterIdentity]ingest.Epoch{}}
	r.links[peer] = l
	r.mu.Unlock()
	r.log.Info("relaying to peer", "peer", peer, "relay", addr)
	r.sweep()
}

// RemovePeer stops relaying to peer.
func (r *Relayer) RemovePeer(peer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.links[peer]; l != nil {
		l.close()
		delete(r.links, peer)
	}
}

func (l *link) close() {
	l.cancel()
	_ = l.conn.Close()
}

// Changed is ingest.ReplicaSet.Changed: id's state, stream or epoch
// changed. It does not block.
func (r *Relayer) Changed(id ingest.ClusterIdentity) {
	h, ok := holding(r.opts.In, id, false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		prev := r.owners[id]
		if !h.Relayed && prev != "" && prev != r.opts.Self {
			r.opts.Metrics.failovers.Inc()
			r.log.Info("spoke re-homed to this replica", "mesh", id.Mesh, "cluster", id.Cluster, "previous_owner", prev, "epoch", h.Epoch)
		}
		r.owners[id] = h.Owner
	} else {
		// No longer held (withdrawn, or dropped after its grace): what
		// was kept of it goes, so that clusters come and go for months
		// without the maps growing. Its relays end on the poke below.
		r.forget(id)
	}
	for _, l := range r.links {
		if ok && r.relays(h) {
			r.ensure(l, id)
		}
		if rl := l.relays[id]; rl != nil {
			rl.poke()
		}
	}
}

// forget drops what the Relayer keeps of id across its relays: its last
// owner and the epoch each peer got in full. Called with r.mu held.
func (r *Relayer) forget(id ingest.ClusterIdentity) {
	delete(r.owners, id)
	for _, l := range r.links {
		delete(l.done, id)
	}
}

// relays reports whether this replica relays h.
func (r *Relayer) relays(h ingest.Holding) bool {
	if !h.Relayed && h.Owner == r.opts.Self {
		return true
	}
	return r.opts.Adopt != nil && !h.Connected && r.opts.Adopt(h)
}

// sweep starts the relays that should run and are not running.
func (r *Relayer) sweep() {
	hs := r.opts.In.Holdings(ingest.HoldingFilter{})
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range hs {
		if !r.relays(h) {
			continue
		}
		for _, l := range r.links {
			r.ensure(l, h.ClusterIdentity)
		}
	}
}

// ensure starts l's relay of id if it is not running (r.mu held).
func (r *Relayer) ensure(l *link, id ingest.ClusterIdentity) {
	if l.relays[id] != nil || l.ctx.Err() != nil {
		return
	}
	rl := &relay{wake: make(chan struct{}, 1)}
	rl.stats = RelayStatus{Peer: l.peer, Cluster: id, State: "starting"}
	rl.changeAt = time.Now()
	l.relays[id] = rl
	go r.run(l, id, rl)
}

func (rl *relay) poke() {
	rl.mu.Lock()
	if rl.changeAt.IsZero() {
		rl.changeAt = time.Now()
	}
	rl.mu.Unlock()
	select {
	case rl.wake <- struct{}{}:
	default:
	}
}

func (rl *relay) set(f func(*RelayStatus)) {
	rl.mu.Lock()
	f(&rl.stats)
	rl.mu.Unlock()
}

// errEpoch ends a stream whose cluster has a new epoch (or is gone).
var errEpoch = errors.New("the cluster's epoch changed")

// run relays id to l until it no longer should.
func (r *Relayer) run(l *link, id ingest.ClusterIdentity, rl *relay) {
	defer func() {
		r.mu.Lock()
		if l.relays[id] == rl {
			delete(l.relays, id)
		}
		r.mu.Unlock()
		// A Changed that found this relay still registered only woke it:
		// looked at after the relay is gone, the cluster is relayed anew
		// if it is this replica's to relay again (a Changed after this
		// look starts the relay itself).
		h, ok := holding(r.opts.In, id, false)
		switch {
		case !ok:
			// Gone while this relay ran: a done epoch it recorded after
			// Changed forgot the cluster would stay forever.
			r.mu.Lock()
			delete(l.done, id)
			r.mu.Unlock()
		case l.ctx.Err() == nil:
			r.mu.Lock()
			if r.relays(h) {
				r.ensure(l, id)
			}
			r.mu.Unlock()
		}
	}()
	b := retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}.New()
	for l.ctx.Err() == nil {
		h, ok := holding(r.opts.In, id, false)
		r.mu.Lock()
		should := ok && r.relays(h)
		done, isDone := l.done[id]
		r.mu.Unlock()
		if !should {
			return
		}
		if !h.EverSynced || (isDone && done == h.Epoch) {
			rl.set(func(s *RelayStatus) {
				if s.State != "done" {
					s.State = "waiting for the cluster's synced state"
				}
			})
			select {
			case <-rl.wake:
				continue
			case <-l.ctx.Done():
				return
			}
		}
		err := r.stream(l, id, h, rl)
		switch {
		case err == nil:
			r.mu.Lock()
			l.done[id] = h.Epoch
			r.mu.Unlock()
			rl.set(func(s *RelayStatus) { s.State = "done" })
			b.Reset()
		case errors.Is(err, errEpoch):
			b.Reset()
		case status.Code(err) == codes.FailedPrecondition:
			// The peer holds a newer epoch: this relay is late.
			r.mu.Lock()
			l.done[id] = h.Epoch
			r.mu.Unlock()
			rl.set(func(s *RelayStatus) { s.State, s.LastError = "done", err.Error() })
			r.log.Info("peer refused a late relay", "peer", l.peer, "mesh", id.Mesh, "cluster", id.Cluster, "epoch", h.Epoch, "err", err)
		default:
			if l.ctx.Err() != nil {
				return
			}
			rl.set(func(s *RelayStatus) { s.State, s.LastError = "retrying", err.Error() })
			wait := b.NextBackOff()
			r.log.Debug("relay stream ended; retrying", "peer", l.peer, "mesh", id.Mesh, "cluster", id.Cluster, "in", wait, "err", err)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				return
			}
		}
	}
}

// stream relays id at h's epoch on one stream. It returns nil once a
// disconnected cluster's state was sent in full and the peer ended the
// stream, errEpoch when the epoch changed, or the stream's error.
func (r *Relayer) stream(l *link, id ingest.ClusterIdentity, h ingest.Holding, rl *relay) error {
	md := metadata.Pairs(protocol.MetadataMesh, id.Mesh, protocol.MetadataCluster, id.Cluster,
		protocol.MetadataProtocol, protocol.Version, protocol.MetadataDomainSuffix, h.DomainSuffix,
		MetadataOwner, h.Owner, MetadataEpoch, h.Epoch.String(), MetadataReplica, r.opts.Self)
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(l.ctx, md))
	defer cancel()
	st, err := protocolv1.NewSyncClient(l.conn).Push(ctx)
	if err != nil {
		return err
	}
	r.opts.Metrics.relayStreams.Inc()
	defer r.opts.Metrics.relayStreams.Dec()
	rl.set(func(s *RelayStatus) { s.Epoch, s.State, s.LastError = h.Epoch, "open", "" })

	// Ask the peer what it holds (Resume, nonce 1): a peer that holds a
	// complete state of the cluster (from this owner's earlier relay, or
	// an earlier owner's) gets only what differs.
	sent, err := r.resume(st, id, rl)
	if err != nil {
		return err
	}
	nonce := uint64(1)

	var (
		pmu     sync.Mutex
		pending = map[string]time.Time{} // nonce -> the change it carries
	)
	ended := make(chan error, 1)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				ended <- err
				return
			}
			pmu.Lock()
			at, ok := pending[resp.GetResponseNonce()]
			delete(pending, resp.GetResponseNonce())
			pmu.Unlock()
			if resp.GetErrorDetail() != nil {
				r.opts.Metrics.relayMsgs.WithLabelValues("nack").Inc()
				rl.set(func(s *RelayStatus) { s.Nacked++; s.LastError = resp.GetErrorDetail().GetMessage() })
				r.log.Warn("peer rejected relayed resources", "peer", l.peer, "mesh", id.Mesh, "cluster", id.Cluster, "reason", resp.GetErrorDetail().GetMessage())
				continue
			}
			r.opts.Metrics.relayMsgs.WithLabelValues("ack").Inc()
			now := time.Now()
			rl.set(func(s *RelayStatus) {
				s.Acked++
				s.LastAckAt = now
				if ok {
					s.Lag = now.Sub(at).String()
				}
			})
			if ok {
				r.opts.Metrics.relayLag.Observe(now.Sub(at).Seconds())
			}
		}
	}()

	send := func(m *discoveryv3.DeltaDiscoveryResponse, at time.Time) error {
		nonce++
		m.Nonce = strconv.FormatUint(nonce, 10)
		pmu.Lock()
		pending[m.Nonce] = at
		pmu.Unlock()
		if err := st.Send(m); err != nil {
			return err
		}
		n := proto.Size(m)
		r.opts.Metrics.relayBytes.Add(float64(n))
		rl.set(func(s *RelayStatus) { s.Messages++; s.Bytes += uint64(n) })
		return nil
	}
	first := true
	// rev is the cluster's Rev that sent reflects: after the first full
	// diff, each wake asks only for what changed since.
	var rev uint64
	for {
		rl.mu.Lock()
		at := rl.changeAt
		rl.changeAt = time.Time{}
		rl.mu.Unlock()
		if at.IsZero() {
			at = time.Now()
		}
		hs := r.opts.In.Holdings(ingest.HoldingFilter{Only: id, Objects: true, ChangedSince: rev})
		ok := len(hs) == 1
		var cur ingest.Holding
		if ok {
			cur = hs[0]
		}
		r.mu.Lock()
		still := ok && cur.Epoch == h.Epoch && r.relays(cur) && cur.EverSynced
		r.mu.Unlock()
		if !still {
			_ = st.CloseSend()
			return errEpoch
		}
		var msgs []*discoveryv3.DeltaDiscoveryResponse
		if cur.Changes != nil {
			msgs = r.diffChanges(id, cur.Changes, sent)
		} else {
			msgs = r.diff(id, cur.Objects, sent)
		}
		rev = cur.Rev
		for _, m := range msgs {
			if err := send(m, at); err != nil {
				return err
			}
		}
		if first {
			if err := send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL}, at); err != nil {
				return err
			}
			first = false
		}
		if !cur.Connected {
			// The spoke's stream has ended: the peer keeps what it was sent,
			// as stale, once this stream ends too.
			if err := st.CloseSend(); err != nil {
				return err
			}
			select {
			case err := <-ended:
				return err
			case <-l.ctx.Done():
				return l.ctx.Err()
			}
		}
		select {
		case <-rl.wake:
		case err := <-ended:
			if err == nil {
				err = errors.New("the peer ended the relay stream")
			}
			return err
		case <-l.ctx.Done():
			return l.ctx.Err()
		}
	}
}

// resume sends Resume as the stream's first message and reads the peer's
// answer: what it holds of id when resume is in effect (the diff starts
// from it: what it holds and this replica does not is removed
// explicitly), or an empty state when the peer asks for the full state (an
// older peer, or one without a complete state of id). A hint that does not
// parse ends the stream; the next one then sends the full state.
func (r *Relayer) resume(st protocolv1.Sync_PushClient, id ingest.ClusterIdentity, rl *relay) (map[string]map[string]string, error) {
	rl.mu.Lock()
	full := rl.fullNext
	rl.fullNext = false
	rl.stats.Resumed = false
	rl.mu.Unlock()
	if full {
		return map[string]map[string]string{}, nil
	}
	// The peer names only the types it holds differently from what this
	// replica holds now (digests); the diff starts from what it names.
	mine := protocol.Held{}
	if cur, ok := holding(r.opts.In, id, true); ok {
		for t, byName := range cur.Objects {
			vs := make(map[string]string, len(byName))
			for n, o := range byName {
				vs[n] = o.Version
			}
			mine[t] = vs
		}
	}
	m := protocol.ResumeMessage(mine)
	m.Nonce = "1"
	if err := st.Send(m); err != nil {
		return nil, err
	}
	n := proto.Size(m)
	r.opts.Metrics.relayBytes.Add(float64(n))
	rl.set(func(s *RelayStatus) { s.Messages++; s.Bytes += uint64(n) })
	held, resumed, err := protocol.ReadResume(st.Recv, m.Nonce, mine)
	if err != nil {
		if he := (*protocol.HintError)(nil); errors.As(err, &he) {
			rl.mu.Lock()
			rl.fullNext = true
			rl.mu.Unlock()
			r.log.Warn("peer's resume hint refused; the next relay stream sends the full state", "mesh", id.Mesh, "cluster", id.Cluster, "err", err)
		}
		return nil, err
	}
	if !resumed {
		return map[string]map[string]string{}, nil
	}
	rl.set(func(s *RelayStatus) { s.Resumed = true })
	r.log.Debug("relay resumed", "mesh", id.Mesh, "cluster", id.Cluster, "held", held.Count())
	return held, nil
}

// diff returns the messages that bring a peer from sent to objs, and
// records them in sent.
func (r *Relayer) diff(id ingest.ClusterIdentity, objs map[string]map[string]*meshconfig.Object, sent map[string]map[string]string) []*discoveryv3.DeltaDiscoveryResponse {
	types := make(map[string]map[string]*meshconfig.Object, len(objs)+len(sent))
	maps.Copy(types, objs)
	for t := range sent {
		if _, ok := types[t]; !ok {
			types[t] = nil
		}
	}
	return r.batch(id, types, sent, func(t string, byName map[string]string, remove func(name string)) {
		for name := range byName {
			if _, ok := objs[t][name]; !ok {
				remove(name)
			}
		}
	})
}

// batch returns the messages that carry, type by type (every key of
// upserts), the objects of upserts a peer holding sent does not hold in
// that version, then the removals removals names (it calls remove for
// each), batched by BatchSize; it records them in sent.
func (r *Relayer) batch(id ingest.ClusterIdentity, upserts map[string]map[string]*meshconfig.Object, sent map[string]map[string]string,
	removals func(t string, byName map[string]string, remove func(name string))) []*discoveryv3.DeltaDiscoveryResponse {
	var out []*discoveryv3.DeltaDiscoveryResponse
	typeURLs := slices.Sorted(maps.Keys(upserts))
	for _, t := range typeURLs {
		byName := sent[t]
		if byName == nil {
			byName = map[string]string{}
			sent[t] = byName
		}
		m := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: t}
		flush := func() {
			if len(m.Resources)+len(m.RemovedResources) > 0 {
				out = append(out, m)
				m = &discoveryv3.DeltaDiscoveryResponse{TypeUrl: t}
			}
		}
		for name, o := range upserts[t] {
			if byName[name] == o.Version {
				continue
			}
			res, err := protocol.Encode(o)
			if err != nil {
				r.log.Error("relayed resource not encodable; skipped", "mesh", id.Mesh, "cluster", id.Cluster, "type", t, "name", name, "err", err)
				continue
			}
			byName[name] = o.Version
			m.Resources = append(m.Resources, res)
			if len(m.Resources) >= r.opts.BatchSize {
				flush()
			}
		}
		removals(t, byName, func(name string) {
			delete(byName, name)
			m.RemovedResources = append(m.RemovedResources, name)
			if len(m.RemovedResources) >= r.opts.BatchSize {
				flush()
			}
		})
		flush()
	}
	return out
}

// diffChanges is diff for only the resources that changed (nil:
// removed): the messages that bring a peer holding sent up to date.
func (r *Relayer) diffChanges(id ingest.ClusterIdentity, changes map[string]map[string]*meshconfig.Object, sent map[string]map[string]string) []*discoveryv3.DeltaDiscoveryResponse {
	objs := make(map[string]map[string]*meshconfig.Object, len(changes))
	removed := map[string]map[string]bool{}
	for t, byName := range changes {
		objs[t] = map[string]*meshconfig.Object{}
		for name, o := range byName {
			if o != nil {
				objs[t][name] = o
				continue
			}
			if removed[t] == nil {
				removed[t] = map[string]bool{}
			}
			removed[t][name] = true
		}
	}
	return r.batch(id, objs, sent, func(t string, byName map[string]string, remove func(name string)) {
		for name := range removed[t] {
			if _, ok := byName[name]; ok {
				remove(name)
			}
		}
	})
}

// Status lists every relay, by peer then cluster.
func (r *Relayer) Status() []RelayStatus {
	r.mu.Lock()
	var out []RelayStatus
	for _, l := range r.links {
		for _, rl := range l.relays {
			rl.mu.Lock()
			out = append(out, rl.stats)
			rl.mu.Unlock()
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Peer != out[j].Peer {
			return out[i].Peer < out[j].Peer
		}
		return out[i].Cluster.String() < out[j].Cluster.String()
	})
	return out
}

// String names a relay in logs.
func (s RelayStatus) String() string { return fmt.Sprintf("%s→%s@%s", s.Cluster, s.Peer, s.Epoch) }
