package replica

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/navemesh/nave/hub/ingest"
)

// SpokePeer is a ready peer as a spoke could be moved to it: its id, the
// host:port spokes reach its sync service at (replicas.spokeAddress; ""
// if it gives none) and the spokes it gossips it owns. A plain value.
type SpokePeer struct {
	ID      string `json:"id"`
	Address string `json:"address,omitempty"`
	Spokes  int    `json:"spokes"`
}

// SpokeMove is one decision of PlanSpokeMove: move Cluster (its stream
// of Epoch) off this replica, hinting the least-loaded ready peer To at
// Redirect. A plain value.
type SpokeMove struct {
	Cluster  ingest.ClusterIdentity `json:"cluster"`
	Epoch    ingest.Epoch           `json:"epoch"`
	To       string                 `json:"to"`
	Redirect string                 `json:"redirect,omitempty"`
	// Mine, Share and Least are the counts the decision was taken on:
	// this replica's spokes, the even share (rounded up) and the
	// least-loaded peer's spokes.
	Mine  int `json:"mine"`
	Share int `json:"share"`
	Least int `json:"least"`
}

// SpokeCounts counts the spokes each replica owns: this replica's (self)
// from its own connected streams, a peer's as the larger of what it
// gossips and the connected relays of its spokes held here (a relay opens
// as soon as a spoke lands, well before the next gossip). Only the ready
// peers listed are counted.
func SpokeCounts(self string, holdings []ingest.Holding, peers []SpokePeer) map[string]int {
	out := map[string]int{self: 0}
	relayed := map[string]int{}
	for _, h := range holdings {
		switch {
		case !h.Connected:
		case !h.Relayed:
			out[self]++
		default:
			relayed[h.Owner]++
		}
	}
	for _, p := range peers {
		if p.ID != self {
			out[p.ID] = max(p.Spokes, relayed[p.ID])
		}
	}
	return out
}

// PlanSpokeMove decides whether this replica (self) sheds one of its
// spokes toward an even spread over itself and the ready peers, and
// which: it sheds only when it holds more than its share (the total over
// the replicas, rounded up) and at least two more than the least-loaded
// peer — so a move never leaves the receiver with more than this replica
// has left, and no two replicas hand a spoke back and forth (hysteresis).
// Only a spoke that dialled (not a polled one, whose replica hub/poll
// decides) and whose current stream has synced and is at least minAge old
// is moved; the oldest first. ok is false with why when nothing moves.
func PlanSpokeMove(self string, holdings []ingest.Holding, peers []SpokePeer, now time.Time, minAge time.Duration) (mv SpokeMove, ok bool, why string) {
	var ready []SpokePeer
	for _, p := range peers {
		if p.ID != self {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return SpokeMove{}, false, "no ready peer"
	}
	counts := SpokeCounts(self, holdings, ready)
	total := 0
	for _, n := range counts {
		total += n
	}
	mine := counts[self]
	share := int(math.Ceil(float64(total) / float64(len(ready)+1)))
	slices.SortFunc(ready, func(a, b SpokePeer) int {
		if d := counts[a.ID] - counts[b.ID]; d != 0 {
			return d
		}
		return strings.Compare(a.ID, b.ID)
	})
	least := ready[0]
	mv = SpokeMove{To: least.ID, Redirect: least.Address, Mine: mine, Share: share, Least: counts[least.ID]}
	if mine <= share || mine-counts[least.ID] < 2 {
		return mv, false, fmt.Sprintf("even: %d spoke(s) here, share %d, least-loaded peer %s has %d", mine, share, least.ID, counts[least.ID])
	}
	var oldest *ingest.Holding
	for i := range holdings {
		h := &holdings[i]
		if h.Relayed || h.Polled || !h.Connected || !h.Synced || now.Sub(h.Epoch.Time()) < minAge {
			continue
		}
		if oldest == nil || h.Epoch.Before(oldest.Epoch) {
			oldest = h
		}
	}
	if oldest == nil {
		return mv, false, fmt.Sprintf("%d spoke(s) here above the share %d, but none synced and older than %s", mine, share, minAge)
	}
	mv.Cluster, mv.Epoch = oldest.ClusterIdentity, oldest.Epoch
	return mv, true, ""
}

// SpokeBalancerOptions configure a SpokeBalancer.
type SpokeBalancerOptions struct {
	// Self is this replica's id.
	Self string
	// In is the local ingest: the clusters held here, and the spokes'
	// streams it closes so that they reconnect elsewhere (Move).
	In Ingest
	// Peers lists the ready peers (Membership.SpokePeers).
	Peers func() []SpokePeer
	// Rate bounds the spokes moved per second (0: never move one); each
	// move waits too until the previous spoke has landed (its cluster is
	// connected again, here or at a peer) or Settle passed.
	Rate float64
	// MinAge is how long a spoke's stream must have been open before it
	// may be moved.
	MinAge time.Duration
	// Settle bounds the wait for a moved spoke to land; 0 means 15s.
	Settle time.Duration
	// Interval is how often the spread is checked; 0 means 1s. Each move
	// happens at a random moment within the interval after its decision.
	Interval time.Duration
	Logger   *slog.Logger
	Metrics  *Metrics
}

// SpokeBalancer moves spokes from a replica that owns more than its share
// (a replica joined, or spokes all landed on one): one at a time, at most
// Rate a second, at a random moment, with a clear status that tells the
// spoke to reconnect at once and names the least-loaded peer to try first
// (docs/replicas.md, Balancing spokes). The move is a reconnect: the new
// owner opens a new epoch and relays the spoke's full state; every replica
// keeps the cluster, stale, meanwhile; no proxy sees a removal. It is
// safe for concurrent use.
type SpokeBalancer struct {
	opts SpokeBalancerOptions

	mu      sync.Mutex
	lastAt  time.Time
	pending *SpokeMove
	last    *SpokeMove
	why     string
	moved   int
}

// NewSpokeBalancer returns a SpokeBalancer; Run it.
func NewSpokeBalancer(opts SpokeBalancerOptions) *SpokeBalancer {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Settle <= 0 {
		opts.Settle = 15 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &SpokeBalancer{opts: opts}
}

// Tick checks the spread and, if this replica should shed a spoke and no
// earlier move is still landing, schedules one move at a random moment of
// the interval. It returns the move scheduled, if any.
func (b *SpokeBalancer) Tick() (SpokeMove, bool) {
	holdings := b.opts.In.Holdings(ingest.HoldingFilter{})
	counts := map[string]int{}
	peers := b.opts.Peers()
	for id, n := range SpokeCounts(b.opts.Self, holdings, peers) {
		counts[id] = n
	}
	b.opts.Metrics.spokes.Set(float64(counts[b.opts.Self]))
	if b.opts.Rate <= 0 {
		return SpokeMove{}, false
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.pending; p != nil {
		if !landed(holdings, *p) && now.Sub(b.lastAt) < b.opts.Settle {
			b.why = fmt.Sprintf("waiting for %s to land", p.Cluster)
			return SpokeMove{}, false
		}
		b.pending = nil
	}
	if !b.lastAt.IsZero() && now.Sub(b.lastAt).Seconds() < 1/b.opts.Rate {
		return SpokeMove{}, false
	}
	mv, ok, why := PlanSpokeMove(b.opts.Self, holdings, peers, now, b.opts.MinAge)
	if !ok {
		b.why = why
		return SpokeMove{}, false
	}
	b.pending, b.lastAt, b.why = &mv, now, ""
	b.opts.Logger.Info("moving a spoke toward an even spread", "mesh", mv.Cluster.Mesh, "cluster", mv.Cluster.Cluster,
		"spokes", mv.Mine, "share", mv.Share, "to", mv.To, "toSpokes", mv.Least, "redirect", mv.Redirect)
	time.AfterFunc(rand.N(b.opts.Interval), func() {
		reason := fmt.Sprintf("balancing spokes across hub replicas: replica %s owns %d, the even share is %d, replica %s owns %d", b.opts.Self, mv.Mine, mv.Share, mv.To, mv.Least)
		if b.opts.In.Move(mv.Cluster, mv.Epoch, reason, mv.Redirect) {
			b.opts.Metrics.shedSpokes.Inc()
			b.mu.Lock()
			b.moved++
			b.last = &mv
			b.mu.Unlock()
		}
	})
	return mv, true
}

// landed reports whether the cluster moved by mv is connected again with
// a newer stream, here or relayed by a peer.
func landed(holdings []ingest.Holding, mv SpokeMove) bool {
	for _, h := range holdings {
		if h.ClusterIdentity == mv.Cluster {
			return h.Connected && mv.Epoch.Before(h.Epoch)
		}
	}
	return false
}

// Run ticks every interval until stop is closed.
func (b *SpokeBalancer) Run(stop <-chan struct{}) { every(b.opts.Interval, stop, func() { b.Tick() }) }

// SpokeBalance is what /debug/replicas shows of spoke balancing. A plain
// value.
type SpokeBalance struct {
	// Spokes is the spokes each replica owns, as this replica counts them.
	Spokes map[string]int `json:"spokes"`
	Rate   float64        `json:"rate"`
	MinAge string         `json:"minAge"`
	// Moved is how many spokes this replica moved away; Last the latest,
	// Pending one still landing.
	Moved   int        `json:"moved"`
	Last    *SpokeMove `json:"last,omitempty"`
	Pending *SpokeMove `json:"pending,omitempty"`
	// Idle says why nothing moves now.
	Idle string `json:"idle,omitempty"`
}

// Status reports the balancer's state.
func (b *SpokeBalancer) Status() SpokeBalance {
	counts := SpokeCounts(b.opts.Self, b.opts.In.Holdings(ingest.HoldingFilter{}), b.opts.Peers())
	b.mu.Lock()
	defer b.mu.Unlock()
	return SpokeBalance{Spokes: counts, Rate: b.opts.Rate, MinAge: b.opts.MinAge.String(), Moved: b.moved, Last: b.last, Pending: b.pending, Idle: b.why}
}
