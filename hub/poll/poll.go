// Package poll is the hub's side of polled mode: for spokes that accept
// inbound connections but may not dial out, the hub dials each configured
// spoke (with jittered exponential backoff), opens the spoke's Poll stream
// and hands it to ingest as if the spoke had pushed it: the same
// authentication (the spoke's cluster certificate, enrolled and not
// revoked, and the cluster configured at that address), ordering,
// ACK/NACK, staging until the synced marker and prune rules (ingest.Server.Poll).
// The stream's gRPC roles are swapped, its messages are not: a small
// adapter makes the hub's client stream look like the Push server stream
// ingest serves. Beside an admitted Poll stream the hub opens PollWatch,
// the Watch stream dialled the same way, for the spoke's remote view.
//
// With hub replicas, each spoke is dialled by one owner at a time (Mine):
// the others hold its state through the owner's relay, as for a pushed
// spoke.
package poll

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/retry"
)

// Target is a polled spoke: the cluster it must prove to be, and where it
// listens.
type Target struct {
	ID      ingest.ClusterIdentity
	Address string
}

func (t Target) String() string { return t.ID.String() + "=" + t.Address }

// Ingest is what the Poller hands streams to (ingest.Server).
type Ingest interface {
	Poll(stream protocolv1.Sync_PushServer, want ingest.ClusterIdentity) error
	PollWatch(stream protocolv1.Sync_WatchServer, want ingest.ClusterIdentity) error
}

// Options configure a Poller.
type Options struct {
	Targets []Target
	// TLS is what the hub dials with (servingcert.Cert.ClientConfig: it
	// presents the hub's certificate; the spoke's is verified by ingest's
	// Authenticator); nil dials without TLS (tls.plaintext).
	TLS *tls.Config
	// BackoffInitial and BackoffMax bound the waits between attempts:
	// the first within 50-150 % of BackoffInitial, each next 1.5 times
	// the last, none longer than BackoffMax. The waits start over once a
	// stream was admitted.
	BackoffInitial, BackoffMax time.Duration
	MaxMessageBytes            int
	// Mine reports whether this hub dials id now (with replicas: whether
	// it is id's owner); nil: always. It is asked before every attempt,
	// and every Recheck while a stream is open (a stream this hub no
	// longer owns is closed).
	Mine func(id ingest.ClusterIdentity) bool
	// Hosted reports whether the hub serves mesh (tenants.Registry.Hosted);
	// nil: every mesh. A target of a mesh not served (deleted at runtime,
	// or not yet created) is not dialled, and its open stream is closed,
	// asked as Mine is.
	Hosted  func(mesh string) bool
	Recheck time.Duration
	Logger  *slog.Logger
	// Registerer receives nave_hub_poll_*; nil registers nowhere.
	Registerer prometheus.Registerer
}

// Target states shown at /debug/polled and in nave_hub_poll_targets.
const (
	StateConnecting = "connecting"
	StateStreaming  = "streaming"
	StateBackoff    = "backoff"
	StateNotOwner   = "not-owner"
	StateNotHosted  = "mesh-not-hosted"
)

var states = []string{StateConnecting, StateStreaming, StateBackoff, StateNotOwner, StateNotHosted}

// TargetStatus is what /debug/polled shows for one polled spoke.
type TargetStatus struct {
	ingest.ClusterIdentity
	Address   string    `json:"address"`
	State     string    `json:"state"`
	Since     time.Time `json:"since"`
	Attempts  uint64    `json:"attempts"`
	Failures  uint64    `json:"failures"`
	LastError string    `json:"lastError,omitempty"`
	// Streams counts the streams ingest admitted.
	Streams uint64 `json:"streams"`
}

// Poller dials the polled spokes. Run is called once; Status is safe for
// concurrent use.
type Poller struct {
	in      Ingest
	opts    Options
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	targets map[ingest.ClusterIdentity]*TargetStatus
}

// New returns a Poller of opts.Targets; nothing is dialled before Run.
func New(in Ingest, opts Options) *Poller {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Mine == nil {
		opts.Mine = func(ingest.ClusterIdentity) bool { return true }
	}
	if opts.Hosted == nil {
		opts.Hosted = func(string) bool { return true }
	}
	if opts.Recheck <= 0 {
		opts.Recheck = time.Second
	}
	if opts.BackoffInitial <= 0 {
		opts.BackoffInitial = 250 * time.Millisecond
	}
	if opts.BackoffMax < opts.BackoffInitial {
		opts.BackoffMax = max(opts.BackoffInitial, 15*time.Second)
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 16 << 20
	}
	p := &Poller{in: in, opts: opts, log: opts.Logger, targets: map[ingest.ClusterIdentity]*TargetStatus{}}
	for _, t := range opts.Targets {
		p.targets[t.ID] = &TargetStatus{ClusterIdentity: t.ID, Address: t.Address, State: StateConnecting, Since: time.Now()}
	}
	p.metrics = newMetrics(opts.Registerer, p.countStates)
	return p
}

// Run dials every target until ctx ends.
func (p *Poller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, t := range p.opts.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.loop(ctx, t)
		}()
	}
	wg.Wait()
	return nil
}

// loop keeps one target polled while this hub owns it.
func (p *Poller) loop(ctx context.Context, t Target) {
	b := retry.New(p.opts.BackoffInitial, p.opts.BackoffMax)
	for ctx.Err() == nil {
		if state := p.idle(t.ID); state != "" {
			p.set(t.ID, state, nil)
			if !sleep(ctx, p.opts.Recheck) {
				return
			}
			continue
		}
		p.set(t.ID, StateConnecting, nil)
		admitted, err := p.session(ctx, t)
		if ctx.Err() != nil {
			return
		}
		if admitted {
			b.Reset() // the spoke was reached and admitted: start over
		} else {
			p.metrics.failures.WithLabelValues(t.ID.Mesh, t.ID.Cluster).Inc()
			p.mu.Lock()
			p.targets[t.ID].Failures++
			p.mu.Unlock()
		}
		wait := b.NextBackOff()
		p.set(t.ID, StateBackoff, err)
		p.log.Warn("polled spoke stream ended; dialling again", "mesh", t.ID.Mesh, "cluster", t.ID.Cluster, "address", t.Address,
			"in", wait.Round(time.Millisecond), "admitted", admitted, "err", err)
		if !sleep(ctx, wait) {
			return
		}
	}
}

// idle returns why id is not to be dialled now (StateNotHosted,
// StateNotOwner), or "".
func (p *Poller) idle(id ingest.ClusterIdentity) string {
	switch {
	case !p.opts.Hosted(id.Mesh):
		return StateNotHosted
	case !p.opts.Mine(id):
		return StateNotOwner
	}
	return ""
}

// session dials t once and serves its stream until it ends. It reports
// whether ingest admitted the stream (it answered a message).
func (p *Poller) session(ctx context.Context, t Target) (admitted bool, err error) {
	p.mu.Lock()
	p.targets[t.ID].Attempts++
	p.mu.Unlock()
	p.metrics.dials.WithLabelValues(t.ID.Mesh, t.ID.Cluster).Inc()
	creds := insecure.NewCredentials()
	if p.opts.TLS != nil {
		creds = credentials.NewTLS(p.opts.TLS)
	}
	// Each attempt dials afresh, as a spoke's uplink does: a spoke that is
	// back is found by the next attempt.
	conn, err := grpc.NewClient(t.Address, grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(p.opts.MaxMessageBytes), grpc.MaxCallSendMsgSize(p.opts.MaxMessageBytes)))
	if err != nil {
		return false, fmt.Errorf("address %q: %w", t.Address, err)
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A stream this hub no longer owns is closed, also while it waits for
	// the spoke's header.
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(p.opts.Recheck)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if state := p.idle(t.ID); state != "" {
					p.log.Info("closing a polled spoke's stream", "mesh", t.ID.Mesh, "cluster", t.ID.Cluster, "because", state)
					cancel()
					return
				}
			}
		}
	}()
	cs, err := protocolv1.NewPolledClient(conn).Poll(sctx, grpc.WaitForReady(false))
	if err != nil {
		return false, err
	}
	// The spoke names itself (mesh, cluster claims, protocol version,
	// domain suffix) in its response header, as a pushing spoke does in
	// its request metadata.
	header, err := cs.Header()
	if err != nil {
		return false, err
	}
	// Once ingest admitted the stream, the spoke's remote view follows
	// on a PollWatch stream beside it, for as long as the stream lasts.
	watching := make(chan struct{})
	var watchOnce sync.Once
	startWatch := func() {
		watchOnce.Do(func() {
			go func() {
				defer close(watching)
				p.watchLoop(sctx, conn, t)
			}()
		})
	}
	defer func() {
		cancel()
		watchOnce.Do(func() { close(watching) })
		<-watching
	}()
	st := asServer(cs, header, func() {
		p.mu.Lock()
		p.targets[t.ID].Streams++
		p.mu.Unlock()
		p.log.Info("polled spoke admitted", "mesh", t.ID.Mesh, "cluster", t.ID.Cluster, "address", t.Address)
		startWatch()
	})
	p.set(t.ID, StateStreaming, nil)
	err = p.in.Poll(st, t.ID)
	if err == nil {
		err = errors.New("the spoke closed the stream")
	}
	return st.sent.Load(), err
}

// watchLoop keeps a PollWatch stream open to t until ctx ends (its Poll
// stream ended): ingest authenticates it as the Poll stream and hands it
// to the hub's Watch server. A spoke that keeps no remote view answers
// Unimplemented and is not asked again on this connection.
func (p *Poller) watchLoop(ctx context.Context, conn *grpc.ClientConn, t Target) {
	for {
		err := p.watchOnce(ctx, conn, t)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			p.log.Info("the polled spoke keeps no remote view; no Watch", "mesh", t.ID.Mesh, "cluster", t.ID.Cluster, "err", err)
			return
		}
		p.log.Warn("polled spoke watch ended; opening it again", "mesh", t.ID.Mesh, "cluster", t.ID.Cluster, "in", time.Second, "err", err)
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

func (p *Poller) watchOnce(ctx context.Context, conn *grpc.ClientConn, t Target) error {
	cw, err := protocolv1.NewPolledClient(conn).PollWatch(ctx, grpc.WaitForReady(false))
	if err != nil {
		return err
	}
	header, err := cw.Header()
	if err != nil {
		return err
	}
	if len(header.Get(protocol.MetadataProtocol)) == 0 {
		// No header of the spoke's: the stream ended at once (a
		// trailers-only answer, such as Unimplemented); Recv says why.
		if _, err := cw.Recv(); err != nil {
			return err
		}
		return errors.New("the spoke sent no header")
	}
	return p.in.PollWatch(asServer(cw, header, nil), t.ID)
}

func (p *Poller) set(id ingest.ClusterIdentity, state string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.targets[id]
	if t.State != state {
		t.Since = time.Now()
	}
	t.State = state
	if err != nil {
		t.LastError = err.Error()
	}
}

// Status reports every polled spoke's state, sorted by cluster.
func (p *Poller) Status() []TargetStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]TargetStatus, 0, len(p.targets))
	for _, t := range p.targets {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClusterIdentity.String() < out[j].ClusterIdentity.String() })
	return out
}

func (p *Poller) countStates() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := map[string]int{}
	for _, t := range p.targets {
		n[t.State]++
	}
	return n
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
