package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/navemesh/nave/hub/ingest"
)

// Load is what a replica carries: gossiped in its metadata, shown at
// /debug/replicas. A plain value.
type Load struct {
	Spokes  int `json:"spokes"`
	Proxies int `json:"proxies"`
	Meshes  int `json:"meshes"`
}

// meta is a replica's memberlist node metadata (at most
// memberlist.MetaMaxSize bytes as JSON).
type meta struct {
	ID    string `json:"id"`
	Relay string `json:"relay"`
	XDS   string `json:"xds,omitempty"`
	// Spokes is where spokes reach this replica's sync service directly
	// (replicas.spokeAddress): the redirect a peer moving a spoke here
	// names.
	Spokes string `json:"spokes,omitempty"`
	Load   Load   `json:"load"`
	// Ready is set once the replica is ready (Membership.Ready): only then
	// do peers shed proxies toward it.
	Ready bool `json:"ready,omitempty"`
	// Started is when the replica's process joined (Unix ns): a peer that
	// sees it change knows the replica restarted and holds nothing it was
	// relayed before.
	Started int64 `json:"started"`
}

// held is one cluster a replica holds, as its push/pull state tells peers.
type held struct {
	ID        ingest.ClusterIdentity `json:"id"`
	Epoch     ingest.Epoch           `json:"epoch"`
	Owner     string                 `json:"owner,omitempty"`
	Connected bool                   `json:"connected"`
}

// withdrawal tells peers a stale cluster was withdrawn after its grace
// period, as of epoch.
type withdrawal struct {
	ID     ingest.ClusterIdentity `json:"id"`
	Epoch  ingest.Epoch           `json:"epoch"`
	At     time.Time              `json:"at"`
	Reason string                 `json:"reason"`
}

// state is a replica's push/pull state: what it holds and what it withdrew
// lately.
type state struct {
	ID        string       `json:"id"`
	Held      []held       `json:"held"`
	Withdrawn []withdrawal `json:"withdrawn,omitempty"`
}

// message is a user message between replicas.
type message struct {
	Withdrawn *withdrawal `json:"withdrawn,omitempty"`
}

// Options configure a Membership.
type Options struct {
	// ID is this replica's id: a DNS label unique in the set.
	ID string
	// BindAddress and BindPort are where gossip listens (TCP and UDP);
	// AdvertiseAddress and AdvertisePort what peers are told (empty, 0:
	// the bind address, or the first private address when it is 0.0.0.0).
	BindAddress      string
	BindPort         int
	AdvertiseAddress string
	AdvertisePort    int
	// Join lists the members to join: host:port or host (BindPort), a
	// host being an IP address or a DNS name whose every address is
	// tried (a headless Service).
	Join []string
	// RejoinInterval is how often the members in Join are joined again
	// while any address they name is not a live member, so that a
	// replica that started first, or was cut off, finds the others; 0
	// means 10s.
	RejoinInterval time.Duration
	// Keyring encrypts gossip; nil only with Insecure.
	Keyring  *memberlist.Keyring
	Insecure bool
	// RelayAddress is the host:port peers dial to relay to this replica;
	// XDSAddress where it serves proxies (shown only).
	RelayAddress, XDSAddress string
	// SpokeAddress is where spokes reach this replica's sync service
	// directly, gossiped so that a peer moving a spoke here can name it
	// (replicas.spokeAddress); "" names none.
	SpokeAddress string
	// Load reports the replica's load; called about every second.
	Load func() Load
	// In is the local ingest: the clusters it holds are gossiped, and a
	// peer's withdrawal of a stale cluster is applied to it
	// (WithdrawRelayed).
	In Ingest
	// OnPeer and OnPeerGone are called when a peer joins (or restarts, or
	// changes its relay address) and when it leaves or is found dead. They
	// must not block; they are called with memberlist's lock held.
	OnPeer     func(id, relayAddress string)
	OnPeerGone func(id string)
	// QuorumWindow is how long a replica seen alive counts among the
	// members a majority is taken of (see MayWithdraw): the stale grace
	// period.
	QuorumWindow time.Duration
	// ReadyTimeout bounds how long Ready waits for the peers' clusters.
	ReadyTimeout time.Duration
	// Tune, if set, adjusts the memberlist configuration (tests shorten
	// its probe intervals).
	Tune    func(*memberlist.Config)
	Logger  *slog.Logger
	Metrics *Metrics
}

// Membership is this replica's view of the replica set, kept by
// memberlist. It is safe for concurrent use. Lock order: memberlist calls
// its delegates holding its own lock, so nothing here calls memberlist
// while holding mu.
type Membership struct {
	opts    Options
	log     *slog.Logger
	ml      *memberlist.Memberlist
	started time.Time

	mu sync.Mutex
	// peers are the other replicas memberlist reports alive (or suspect),
	// by id, with what their push/pull state said they hold.
	peers map[string]*peer
	// seen is when each replica (self included) was last seen alive.
	seen map[string]time.Time
	// withdrawals are this replica's recent withdrawals and those it was
	// told of, kept for the push/pull state.
	withdrawals map[ingest.ClusterIdentity]withdrawal
	joined      bool
	readyAt     time.Time
	// readyGossiped is set once the metadata said ready.
	readyGossiped bool
	waiting       string
	load          Load
}

type peer struct {
	meta    meta
	addr    string
	held    []held
	stateAt time.Time
}

// Member is one replica as /debug/replicas shows it. A plain value.
type Member struct {
	ID      string    `json:"id"`
	Gossip  string    `json:"gossip"`
	Relay   string    `json:"relay"`
	XDS     string    `json:"xds,omitempty"`
	Spokes  string    `json:"spokes,omitempty"`
	Load    Load      `json:"load"`
	Self    bool      `json:"self,omitempty"`
	Held    int       `json:"held"`
	Ready   bool      `json:"ready"`
	StateAt time.Time `json:"stateAt,omitzero"`
}

// Join starts gossip and joins the members in opts.Join (a failure to
// reach any is logged, and retried every RejoinInterval, while one of
// them is not a live member, until stop is closed).
func Join(opts Options, stop <-chan struct{}) (*Membership, error) {
	if opts.Keyring == nil && !opts.Insecure {
		return nil, errors.New("replicas: no gossip keyring (replicas.keyringFile); gossip in the clear only with replicas.insecureGossip, for tests")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RejoinInterval <= 0 {
		opts.RejoinInterval = 10 * time.Second
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	m := &Membership{opts: opts, log: opts.Logger, started: time.Now(), peers: map[string]*peer{}, seen: map[string]time.Time{opts.ID: time.Now()},
		withdrawals: map[ingest.ClusterIdentity]withdrawal{}}
	if opts.Load != nil {
		m.load = opts.Load()
	}
	c := memberlist.DefaultLANConfig()
	c.Name = opts.ID
	c.BindAddr, c.BindPort = opts.BindAddress, opts.BindPort
	c.AdvertiseAddr, c.AdvertisePort = opts.AdvertiseAddress, opts.AdvertisePort
	if c.AdvertisePort == 0 {
		c.AdvertisePort = opts.BindPort
	}
	c.Keyring = opts.Keyring
	c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
	// A replica that died without leaving (a lost node, a forced delete)
	// comes back under its id at a new address (a StatefulSet's pod keeps
	// its name, not its IP): its peers take the new address as soon as
	// they hold the old one dead, not once they forgot it (memberlist's
	// GossipToTheDeadTime, 30 s). Only a dead member's name is reclaimed:
	// a live one's stays refused as a conflict.
	c.DeadNodeReclaimTime = time.Nanosecond
	c.Delegate = (*delegate)(m)
	c.Events = (*events)(m)
	c.Logger = log.New(&logWriter{log: opts.Logger}, "", 0)
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{c.BindAddr}, BindPort: c.BindPort, Logger: c.Logger})
	if err != nil {
		return nil, fmt.Errorf("replicas: gossip on %s: %w", net.JoinHostPort(c.BindAddr, strconv.Itoa(c.BindPort)), err)
	}
	c.Transport = &countingTransport{NetTransport: nt, sent: opts.Metrics.gossipBytes}
	if opts.Tune != nil {
		opts.Tune(c)
	}
	ml, err := memberlist.Create(c)
	if err != nil {
		nt.Shutdown()
		return nil, fmt.Errorf("replicas: gossip: %w", err)
	}
	m.ml = ml
	m.join()
	go m.loop(stop)
	return m, nil
}

// join joins opts.Join once.
func (m *Membership) join() {
	n, err := m.ml.Join(m.opts.Join)
	m.mu.Lock()
	first := !m.joined
	m.joined = true
	m.mu.Unlock()
	switch {
	case err != nil && n == 0 && first:
		m.log.Warn("no replica reached; serving alone until one is", "join", strings.Join(m.opts.Join, ","), "err", err)
	case first:
		m.log.Info("joined the replica set", "reached", n, "members", m.ml.NumMembers())
	}
}

// joinedAll reports whether every address opts.Join names (resolved as
// memberlist resolves it) is a live member's: joining again would only
// repeat a push/pull with each, which memberlist's own push/pull already
// does. A name that does not resolve counts as not joined.
func (m *Membership) joinedAll() bool {
	live := map[string]bool{}
	for _, n := range m.ml.Members() {
		if n.State == memberlist.StateAlive {
			live[net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))] = true
		}
	}
	for _, j := range m.opts.Join {
		host, port, err := net.SplitHostPort(j)
		if err != nil {
			host, port = j, strconv.Itoa(m.opts.BindPort)
		}
		ips := []net.IP{net.ParseIP(host)}
		if ips[0] == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
			cancel()
			if err != nil || len(addrs) == 0 {
				return false
			}
			ips = ips[:0]
			for _, a := range addrs {
				ips = append(ips, a.IP)
			}
		}
		for _, ip := range ips {
			if !live[net.JoinHostPort(ip.String(), port)] {
				return false
			}
		}
	}
	return true
}

func (m *Membership) loop(stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastJoin := time.Now()
	for {
		select {
		case <-stop:
			if err := m.ml.Leave(2 * time.Second); err != nil {
				m.log.Warn("leaving the replica set", "err", err)
			}
			_ = m.ml.Shutdown()
			return
		case <-tick.C:
		}
		m.refresh()
		if time.Since(lastJoin) >= m.opts.RejoinInterval {
			lastJoin = time.Now()
			if !m.joinedAll() {
				m.join()
			}
		}
	}
}

// refresh records who is alive and gossips a changed load or readiness.
func (m *Membership) refresh() {
	_ = m.Ready() // latches readiness, which the metadata gossips
	now := time.Now()
	alive := m.alive()
	m.mu.Lock()
	for _, id := range alive {
		m.seen[id] = now
	}
	for id, at := range m.seen {
		if now.Sub(at) > m.opts.QuorumWindow {
			delete(m.seen, id)
		}
	}
	for id, w := range m.withdrawals {
		if now.Sub(w.At) > time.Hour {
			delete(m.withdrawals, id)
		}
	}
	changed := !m.readyAt.IsZero() && !m.readyGossiped
	m.readyGossiped = !m.readyAt.IsZero()
	if m.opts.Load != nil {
		l := m.opts.Load()
		changed = changed || l != m.load
		m.load = l
	}
	m.mu.Unlock()
	m.opts.Metrics.members.Set(float64(len(alive)))
	if changed {
		if err := m.ml.UpdateNode(time.Second); err != nil {
			m.log.Debug("gossiping load", "err", err)
		}
	}
}

// alive lists the ids of the members memberlist has not declared dead or
// left, self included, sorted. A suspected member is among them:
// memberlist keeps a remote member's state in its own nodeState and never
// updates the Node.State that Members returns, so the check below only
// guards against a future memberlist that does.
func (m *Membership) alive() []string {
	var out []string
	for _, n := range m.ml.Members() {
		if n.State == memberlist.StateAlive {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// ID is this replica's id.
func (m *Membership) ID() string { return m.opts.ID }

// Leader is the lowest id among the live members.
func (m *Membership) Leader() string {
	alive := m.alive()
	if len(alive) == 0 {
		return m.opts.ID
	}
	return alive[0]
}

// Quorum reports whether this replica sees a majority of the replicas
// seen alive within the quorum window, and the two counts.
func (m *Membership) Quorum() (ok bool, alive, known int) {
	a := m.alive()
	m.mu.Lock()
	known = len(m.seen)
	for _, id := range a {
		if _, ok := m.seen[id]; !ok {
			known++
		}
	}
	m.mu.Unlock()
	return 2*len(a) > known, len(a), known
}

// Lost reports whether the replica that owned a cluster at epoch no
// longer has it: it is not a live member, or it has restarted since it
// opened that epoch (its gossiped start is later; both times are the
// owner's own clock). Such a stale cluster is relayed by whoever holds it.
func (m *Membership) Lost(owner string, epoch ingest.Epoch) bool {
	if owner == m.opts.ID {
		return m.started.UnixNano() > epoch.At
	}
	if !m.IsAlive(owner) {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peers[owner]
	return p != nil && p.meta.Started > epoch.At
}

// IsAlive reports whether replica id is a live member.
func (m *Membership) IsAlive(id string) bool { return slices.Contains(m.alive(), id) }

// MayWithdraw is ingest.ReplicaSet.MayWithdraw: a stale cluster is withdrawn
// after its grace period only by a replica that sees a majority of the
// set, and then by its last owner if that replica lives, else by the
// leader.
func (m *Membership) MayWithdraw(id ingest.ClusterIdentity, owner string) bool {
	if ok, _, _ := m.Quorum(); !ok {
		return false
	}
	if owner == "" || owner == m.opts.ID {
		return true
	}
	alive := m.alive()
	if slices.Contains(alive, owner) {
		return false
	}
	return len(alive) > 0 && alive[0] == m.opts.ID
}

// Withdrawn tells every peer that this replica withdrew id
// (ingest.ReplicaSet.Withdrawn); peers still missing it learn it from the next
// push/pull.
func (m *Membership) Withdrawn(id ingest.ClusterIdentity, epoch ingest.Epoch) {
	w := withdrawal{ID: id, Epoch: epoch, At: time.Now(), Reason: "withdrawn by replica " + m.opts.ID + " after its grace period"}
	m.mu.Lock()
	m.withdrawals[id] = w
	m.mu.Unlock()
	b, err := json.Marshal(message{Withdrawn: &w})
	if err != nil {
		return
	}
	for _, n := range m.ml.Members() {
		if n.Name == m.opts.ID || n.State != memberlist.StateAlive {
			continue
		}
		go func() {
			if err := m.ml.SendReliable(n, b); err != nil {
				m.log.Warn("telling a peer of a withdrawal", "peer", n.Name, "mesh", id.Mesh, "cluster", id.Cluster, "err", err)
			}
		}()
	}
}

// Members lists the live members, self first.
func (m *Membership) Members() []Member {
	self := m.ml.LocalNode().Address() // not under m.mu: memberlist calls events holding its lock
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []Member{{ID: m.opts.ID, Gossip: self, Relay: m.opts.RelayAddress, XDS: m.opts.XDSAddress, Spokes: m.opts.SpokeAddress, Load: m.load, Self: true, Ready: !m.readyAt.IsZero()}}
	for id, p := range m.peers {
		out = append(out, Member{ID: id, Gossip: p.addr, Relay: p.meta.Relay, XDS: p.meta.XDS, Spokes: p.meta.Spokes, Load: p.meta.Load, Held: len(p.held), StateAt: p.stateAt, Ready: p.meta.Ready})
	}
	slices.SortFunc(out[1:], func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// PeerProxies lists the proxy counts the ready peers gossip.
func (m *Membership) PeerProxies() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for _, p := range m.peers {
		if p.meta.Ready {
			out = append(out, p.meta.Load.Proxies)
		}
	}
	return out
}

// ReadyPeers lists the ids of the live, ready peers, sorted.
func (m *Membership) ReadyPeers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, p := range m.peers {
		if p.meta.Ready {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// SpokePeers lists the ready peers a spoke may be moved to, with the
// address they gossip for spokes and the spokes they gossip they own.
func (m *Membership) SpokePeers() []SpokePeer {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []SpokePeer
	for id, p := range m.peers {
		if p.meta.Ready {
			out = append(out, SpokePeer{ID: id, Address: p.meta.Spokes, Spokes: p.meta.Load.Spokes})
		}
	}
	slices.SortFunc(out, func(a, b SpokePeer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// PeerHeld is what each peer's last push/pull state said it holds.
func (m *Membership) peerHeld() map[string][]held {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]held{}
	for id, p := range m.peers {
		out[id] = p.held
	}
	return out
}

// Ready is this replica's readiness check (/healthz/ready): it has
// joined, and holds the state of every cluster its peers hold (synced,
// at the epoch they hold or a newer one), so that a load balancer never
// sends it proxies with an empty view; or ReadyTimeout has passed. Once
// ready it stays ready.
func (m *Membership) Ready() error {
	m.mu.Lock()
	if !m.readyAt.IsZero() {
		m.mu.Unlock()
		return nil
	}
	joined := m.joined
	m.mu.Unlock()
	if !joined {
		return errors.New("joining the replica set")
	}
	mine := map[ingest.ClusterIdentity]ingest.Holding{}
	for _, h := range m.opts.In.Holdings(ingest.HoldingFilter{}) {
		mine[h.ClusterIdentity] = h
	}
	var missing []string
	for p, hs := range m.peerHeld() {
		for _, h := range hs {
			if got, ok := mine[h.ID]; !ok || !got.EverSynced || got.Epoch.Before(h.Epoch) {
				missing = append(missing, fmt.Sprintf("%s (held by %s)", h.ID, p))
			}
		}
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(missing) > 0 && time.Since(m.started) < m.opts.ReadyTimeout {
		m.waiting = strings.Join(missing, ", ")
		return fmt.Errorf("waiting for the relayed state of %d cluster(s) its peers hold: %s", len(missing), m.waiting)
	}
	if len(missing) > 0 {
		m.log.Warn("ready without the relayed state of every cluster: replicas.readyTimeout passed", "missing", strings.Join(missing, ", "), "timeout", m.opts.ReadyTimeout)
	} else {
		m.log.Info("ready: holds every cluster its peers hold", "after", time.Since(m.started).Round(time.Millisecond))
	}
	m.readyAt = time.Now()
	return nil
}

// delegate is Membership's memberlist.Delegate.
type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	m := (*Membership)(d)
	m.mu.Lock()
	md := meta{ID: m.opts.ID, Relay: m.opts.RelayAddress, XDS: m.opts.XDSAddress, Spokes: m.opts.SpokeAddress, Load: m.load, Ready: !m.readyAt.IsZero(), Started: m.started.UnixNano()}
	m.mu.Unlock()
	b, _ := json.Marshal(md)
	if len(b) > limit {
		md.XDS = ""
		b, _ = json.Marshal(md)
	}
	return b
}

func (d *delegate) NotifyMsg(b []byte) {
	m := (*Membership)(d)
	var msg message
	if err := json.Unmarshal(b, &msg); err != nil {
		m.log.Warn("unreadable replica message", "err", err)
		return
	}
	if w := msg.Withdrawn; w != nil {
		m.applyWithdrawal(*w)
	}
}

func (m *Membership) applyWithdrawal(w withdrawal) {
	m.mu.Lock()
	if old, ok := m.withdrawals[w.ID]; ok && !old.Epoch.Before(w.Epoch) {
		m.mu.Unlock()
		return
	}
	m.withdrawals[w.ID] = w
	m.mu.Unlock()
	m.opts.In.WithdrawRelayed(w.ID, w.Epoch, w.Reason)
}

func (d *delegate) GetBroadcasts(int, int) [][]byte { return nil }

func (d *delegate) LocalState(bool) []byte {
	m := (*Membership)(d)
	st := state{ID: m.opts.ID, Held: []held{}}
	for _, h := range m.opts.In.Holdings(ingest.HoldingFilter{}) {
		if h.EverSynced {
			st.Held = append(st.Held, held{ID: h.ClusterIdentity, Epoch: h.Epoch, Owner: h.Owner, Connected: h.Connected})
		}
	}
	m.mu.Lock()
	for _, w := range m.withdrawals {
		st.Withdrawn = append(st.Withdrawn, w)
	}
	m.mu.Unlock()
	b, _ := json.Marshal(st)
	return b
}

func (d *delegate) MergeRemoteState(b []byte, _ bool) {
	m := (*Membership)(d)
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		m.log.Warn("unreadable replica state", "err", err)
		return
	}
	if st.ID == "" || st.ID == m.opts.ID {
		return
	}
	m.mu.Lock()
	p := m.peers[st.ID]
	if p == nil {
		p = &peer{}
		m.peers[st.ID] = p
	}
	p.held, p.stateAt = st.Held, time.Now()
	m.mu.Unlock()
	for _, w := range st.Withdrawn {
		m.applyWithdrawal(w)
	}
}

// events is Membership's memberlist.EventDelegate.
type events Membership

func (e *events) NotifyJoin(n *memberlist.Node)   { (*Membership)(e).update(n, "joined") }
func (e *events) NotifyUpdate(n *memberlist.Node) { (*Membership)(e).update(n, "") }

func (e *events) NotifyLeave(n *memberlist.Node) {
	m := (*Membership)(e)
	if n.Name == m.opts.ID {
		return
	}
	m.mu.Lock()
	delete(m.peers, n.Name)
	// Still among the replicas a majority is taken of (seen) until the
	// quorum window passes.
	m.seen[n.Name] = time.Now()
	m.mu.Unlock()
	m.opts.Metrics.peerEvents.WithLabelValues("gone").Inc()
	m.log.Warn("replica left or found dead", "peer", n.Name, "address", n.Address(), "state", n.State)
	if m.opts.OnPeerGone != nil {
		m.opts.OnPeerGone(n.Name)
	}
}

func (m *Membership) update(n *memberlist.Node, event string) {
	if n.Name == m.opts.ID {
		return
	}
	var md meta
	if err := json.Unmarshal(n.Meta, &md); err != nil || md.ID != n.Name {
		m.log.Warn("replica with unreadable metadata ignored", "peer", n.Name, "address", n.Address())
		return
	}
	m.mu.Lock()
	p := m.peers[n.Name]
	if p == nil {
		p = &peer{}
		m.peers[n.Name] = p
	}
	// A peer that joined, moved or restarted is relayed everything anew.
	relay := event != "" || p.meta.Relay != md.Relay || p.meta.Started != md.Started
	p.meta, p.addr = md, n.Address()
	m.seen[n.Name] = time.Now()
	m.mu.Unlock()
	if event != "" {
		m.opts.Metrics.peerEvents.WithLabelValues("joined").Inc()
		m.log.Info("replica joined", "peer", n.Name, "address", n.Address(), "relay", md.Relay)
	}
	if relay && m.opts.OnPeer != nil {
		m.opts.OnPeer(n.Name, md.Relay)
	}
}

// logWriter turns memberlist's log lines into slog records.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(b []byte) (int, error) {
	s := strings.TrimSpace(string(b))
	switch {
	case strings.Contains(s, "[ERR]"):
		w.log.Error("memberlist", "msg", s)
	case strings.Contains(s, "[WARN]"):
		w.log.Warn("memberlist", "msg", s)
	default:
		w.log.Debug("memberlist", "msg", s)
	}
	return len(b), nil
}

var _ io.Writer = (*logWriter)(nil)
