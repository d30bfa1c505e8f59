package replica

import (
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"time"
)

// TrackedListener wraps the xDS listener and remembers its open
// connections, oldest first, so that a Balancer can close some. It is safe
// for concurrent use.
type TrackedListener struct {
	net.Listener

	mu    sync.Mutex
	seq   uint64
	conns map[*trackedConn]uint64
}

// Track wraps lis.
func Track(lis net.Listener) *TrackedListener {
	return &TrackedListener{Listener: lis, conns: map[*trackedConn]uint64{}}
}

// Accept accepts and tracks a connection until it is closed.
func (l *TrackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.seq++
	l.conns[tc] = l.seq
	l.mu.Unlock()
	return tc, nil
}

// Len is the number of open connections.
func (l *TrackedListener) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// CloseOldest closes up to n of the oldest open connections and returns
// how many it closed.
func (l *TrackedListener) CloseOldest(n int) int {
	l.mu.Lock()
	all := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		all = append(all, c)
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
	l    *TrackedListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
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
	// Shed closes n proxy connections and returns how many it closed.
	Shed func(n int) int
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
	// wait must outlast that.
	Settle  int
	Logger  *slog.Logger
	Metrics *Metrics
}

// Balancer sheds proxy connections from a replica that holds more than
// its share when peers hold fewer (a replica joined): gradually, at most
// Rate a second, each close at a random moment within the interval, until
// the spread is even within Tolerance. A shed proxy reconnects through the
// load balancer, with what it holds (a delta client sends its versions),
// and is not shown a removal. It is safe for concurrent use.
type Balancer struct {
	opts BalancerOptions
	mu   sync.Mutex
	debt float64
	// streak counts the consecutive checks that saw an excess while this
	// replica's count did not grow; lastMine is the previous check's count.
	streak, lastMine int
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
	return &Balancer{opts: opts}
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

// Tick sheds this interval's part of the excess, the closes spread at
// random over the interval, once the excess has settled (Settle); it
// returns how many it will close.
func (b *Balancer) Tick() int {
	if b.opts.Rate <= 0 {
		return 0
	}
	mine := b.opts.Mine()
	peers := b.opts.Peers()
	excess := b.excessOf(mine, peers)
	b.mu.Lock()
	growing := mine > b.lastMine
	b.lastMine = mine
	switch {
	case excess == 0:
		b.streak, b.debt = 0, 0
	case growing:
		b.streak, b.debt = 0, 0 // proxies still arriving: peers' counts lag
	default:
		b.streak++
	}
	if b.streak < b.opts.Settle {
		b.mu.Unlock()
		return 0
	}
	b.debt += b.opts.Rate * b.opts.Interval.Seconds()
	n := min(int(b.debt), excess)
	b.debt -= float64(n)
	b.mu.Unlock()
	if n > 0 {
		b.opts.Logger.Info("shedding proxy connections toward an even spread", "count", n, "excess", excess, "held", mine, "peers", peers)
	}
	for range n {
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
