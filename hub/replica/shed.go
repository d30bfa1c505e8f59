package replica

import (
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"sync"
	"time"
)

// TrackedListener wraps the xDS listener and remembers its open
// connections, oldest first, and the home replica each proxy names
// (Identify), so that a Balancer can close some. It is safe for
// concurrent use.
type TrackedListener struct {
	net.Listener

	mu    sync.Mutex
	seq   uint64
	conns map[*trackedConn]uint64
	// byRemote finds a connection by its remote address, which a gRPC
	// stream's peer names.
	byRemote map[string]*trackedConn
}

// Track wraps lis.
func Track(lis net.Listener) *TrackedListener {
	return &TrackedListener{Listener: lis, conns: map[*trackedConn]uint64{}, byRemote: map[string]*trackedConn{}}
}

// Accept accepts and tracks a connection until it is closed.
func (l *TrackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l, remote: c.RemoteAddr().String()}
	l.mu.Lock()
	l.seq++
	l.conns[tc] = l.seq
	l.byRemote[tc.remote] = tc
	l.mu.Unlock()
	return tc, nil
}

// Len is the number of open connections.
func (l *TrackedListener) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Identify records the home replica named by the proxy on the connection
// from remote (its node's metadata, xdsbootstrap.MetaHomeReplica); an
// empty home, or an unknown remote, changes nothing. A connection with a
// home is shed only toward it (CloseHomed), never by CloseOldest.
func (l *TrackedListener) Identify(remote, home string) {
	if home == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.byRemote[remote]; c != nil {
		c.home = home
	}
}

// Homes counts the open connections by the home their proxy named, ""
// for those that named none (or have not said yet).
func (l *TrackedListener) Homes() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for c := range l.conns {
		out[c.home]++
	}
	return out
}

// CloseOldest closes up to n of the oldest open connections without a
// home and returns how many it closed.
func (l *TrackedListener) CloseOldest(n int) int { return l.closeOldest(n, "") }

// CloseHomed closes up to n of the oldest open connections whose proxy
// named home (not empty) and returns how many it closed.
func (l *TrackedListener) CloseHomed(home string, n int) int {
	if home == "" {
		return 0
	}
	return l.closeOldest(n, home)
}

func (l *TrackedListener) closeOldest(n int, home string) int {
	l.mu.Lock()
	all := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		if c.home == home {
			all = append(all, c)
		}
	}
	sort.Slice(all, func(i, j int) bool { return l.conns[all[i]] < l.conns[all[j]] })
	l.mu.Unlock()
	if n > len(all) {
		n = len(all)
	}
	for _, c := range all[:n] {
		_ = c.Close()
	}
	return n
}

type trackedConn struct {
	net.Conn
	l      *TrackedListener
	remote string
	once   sync.Once
	home   string // guarded by l.mu
	// ready is ReadOnReady's state, made on the first read (only the
	// connection's reader uses it).
	ready *readyState
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		if c.l.byRemote[c.remote] == c {
			delete(c.l.byRemote, c.remote)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// BalancerOptions configure a Balancer.
type BalancerOptions struct {
	// Mine is this replica's proxy connection count; Peers those of the
	// ready peers (from their gossiped load).
	Mine  func() int
	Peers func() []int
	// Shed closes n proxy connections without a home and returns how many
	// it closed.
	Shed func(n int) int
	// Homing (decision 051): Self is this replica's id; Homes counts its
	// connections by the home replica their proxy names ("" for none, see
	// TrackedListener.Homes); ReadyPeers lists the ids of the live, ready
	// peers; ShedHome closes n connections homed at home and returns how
	// many it closed. Homes nil: no proxy has a home.
	Self       string
	Homes      func() map[string]int
	ReadyPeers func() []string
	ShedHome   func(home string, n int) int
	// Rate bounds the connections shed per second (0: never shed);
	// Tolerance is the share above the even spread tolerated (0.1: 10 %,
	// and at least 2 connections).
	Rate      float64
	Tolerance float64
	// Interval is how often the spread is checked; 0 means 1s.
	Interval time.Duration
	// Settle is how many consecutive checks must see an excess while this
	// replica's count does not grow before it sheds; 0 means 10. During a
	// connection storm every replica's own count outruns its peers'
	// gossiped ones (they arrive about a second late), so an even spread
	// looks uneven; and after a replica dies, its survivors hold its
	// proxies while it still counts as a peer (with its last gossiped
	// count) until memberlist declares it dead, about 6 s with the LAN
	// defaults (memberlist does not tell a suspected member apart), so the
	// wait must outlast that. Proxies away from home are sent home once
	// their home has been a ready peer for Settle checks in a row.
	Settle  int
	Logger  *slog.Logger
	Metrics *Metrics
}

// Balancer sheds proxy connections, at most Rate a second, each close at
// a random moment within the interval, in two cases. A proxy whose
// bootstrap names its home replica (decision 051) and which is held by
// another replica is shed once its home is a ready peer, so that it
// returns there (Envoy picks its highest priority again on a new
// connection); a proxy at home is never shed, nor one whose home is
// gone. A proxy without a home is shed from a replica that holds more
// than its share of an even spread of all connections when peers hold
// fewer (a replica joined), until the spread is even within Tolerance:
// homed proxies count toward the spread (they are load) but are not shed
// for it, so a replica whose namespaces are many keeps few of the
// others. A shed proxy reconnects with what it holds (a delta client
// sends its versions), and is not shown a removal. It is safe for
// concurrent use.
type Balancer struct {
	opts BalancerOptions
	mu   sync.Mutex
	debt float64
	// streak counts the consecutive checks that saw an excess while this
	// replica's count did not grow; lastMine is the previous check's count.
	streak, lastMine int
	// homeStreak counts, per home, the consecutive checks that saw it a
	// ready peer while this replica held proxies homed there.
	homeStreak map[string]int
}

// NewBalancer returns a Balancer; Run it.
func NewBalancer(opts BalancerOptions) *Balancer {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Settle <= 0 {
		opts.Settle = 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &Balancer{opts: opts, homeStreak: map[string]int{}}
}

// Excess is how many connections this replica holds above its share of
// an even spread, past the tolerance (0 if none).
func (b *Balancer) Excess() int { return b.excessOf(b.opts.Mine(), b.opts.Peers()) }

func (b *Balancer) excessOf(mine int, peers []int) int {
	if len(peers) == 0 {
		return 0
	}
	total := mine
	for _, p := range peers {
		total += p
	}
	share := int(math.Ceil(float64(total) / float64(len(peers)+1)))
	slack := max(2, int(math.Ceil(b.opts.Tolerance*float64(share))))
	if mine <= share+slack {
		return 0
	}
	return mine - share
}

// Away is how many connections this replica holds whose home is another
// ready replica, by home.
func (b *Balancer) Away() map[string]int {
	out := map[string]int{}
	if b.opts.Homes == nil || b.opts.ReadyPeers == nil {
		return out
	}
	ready := b.opts.ReadyPeers()
	for home, n := range b.opts.Homes() {
		if home != "" && home != b.opts.Self && n > 0 && slices.Contains(ready, home) {
			out[home] = n
		}
	}
	return out
}

// Tick sheds this interval's part of what is to be shed, the closes
// spread at random over the interval: proxies away from a home that has
// been ready for Settle checks first, then the excess over an even
// spread once it has settled (Settle), only from the proxies without a
// home. It returns how many it will close.
func (b *Balancer) Tick() int {
	if b.opts.Rate <= 0 {
		return 0
	}
	mine := b.opts.Mine()
	peers := b.opts.Peers()
	excess := b.excessOf(mine, peers)
	away := b.Away()
	unhomed := mine
	if b.opts.Homes != nil {
		unhomed = b.opts.Homes()[""]
	}
	b.mu.Lock()
	growing := mine > b.lastMine
	b.lastMine = mine
	switch {
	case excess == 0:
		b.streak = 0
	case growing:
		b.streak = 0 // proxies still arriving: peers' counts lag
	default:
		b.streak++
	}
	for home := range b.homeStreak {
		if away[home] == 0 {
			delete(b.homeStreak, home)
		}
	}
	var homes []string
	for home := range away {
		b.homeStreak[home]++
		if b.homeStreak[home] >= b.opts.Settle {
			homes = append(homes, home)
		}
	}
	slices.Sort(homes)
	if b.streak < b.opts.Settle {
		excess = 0
	}
	excess = min(excess, unhomed)
	due := excess
	for _, home := range homes {
		due += away[home]
	}
	if due == 0 {
		b.debt = 0
		b.mu.Unlock()
		return 0
	}
	b.debt += b.opts.Rate * b.opts.Interval.Seconds()
	n := min(int(b.debt), due)
	b.debt -= float64(n)
	b.mu.Unlock()

	left := n
	sendHome := map[string]int{}
	for _, home := range homes {
		k := min(left, away[home])
		sendHome[home] = k
		left -= k
	}
	if len(sendHome) > 0 && n > left {
		b.opts.Logger.Info("shedding proxy connections toward their home replica", "count", n-left, "away", away)
	}
	if left > 0 {
		b.opts.Logger.Info("shedding proxy connections toward an even spread", "count", left, "excess", excess, "held", mine, "peers", peers)
	}
	for home, k := range sendHome {
		for range k {
			time.AfterFunc(rand.N(b.opts.Interval), func() {
				b.opts.Metrics.shed.Add(float64(b.opts.ShedHome(home, 1)))
			})
		}
	}
	for range left {
		time.AfterFunc(rand.N(b.opts.Interval), func() {
			b.opts.Metrics.shed.Add(float64(b.opts.Shed(1)))
		})
	}
	return n
}

// Run ticks every interval until stop is closed.
func (b *Balancer) Run(stop <-chan struct{}) { every(b.opts.Interval, stop, func() { b.Tick() }) }

// every calls tick every interval until stop is closed.
func every(interval time.Duration, stop <-chan struct{}, tick func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			tick()
		}
	}
}
