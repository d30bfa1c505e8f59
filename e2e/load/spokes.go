package load

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/spoke/uplink"
)

// spokes are the fake spokes of a run: the real uplink code, in process,
// one per cluster, so that the time a change is handed to the spoke is
// known exactly.
type spokes struct {
	ctx context.Context
	// addresses are the hub's spoke listeners: cluster c's uplink dials
	// addresses[c mod len] (a replica set's spokes are spread over it).
	addresses []string
	log       *slog.Logger
	list      []*spoke
}

type spoke struct {
	cluster string
	up      *uplink.Uplink
	cancel  context.CancelFunc
	done    chan struct{}
	desired int
}

func startSpokes(ctx context.Context, addresses []string, w *Workload, log *slog.Logger) *spokes {
	s := &spokes{ctx: ctx, addresses: addresses, log: log}
	for c, name := range w.Clusters {
		sp := &spoke{cluster: name}
		s.list = append(s.list, sp)
		s.start(c, w.Objects(c))
	}
	return s
}

// start runs cluster c's uplink with objs as its state.
func (s *spokes) start(c int, objs []*meshconfig.Object) {
	sp := s.list[c]
	sp.up = uplink.New(uplink.Options{Address: s.addresses[c%len(s.addresses)], Mesh: "default", Cluster: sp.cluster,
		BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second, MaxMessageBytes: 16 << 20,
		Logger: s.log.With("cluster", sp.cluster)})
	sp.up.Update(objs)
	sp.desired = len(objs)
	ctx, cancel := context.WithCancel(s.ctx)
	sp.cancel, sp.done = cancel, make(chan struct{})
	go func() {
		defer close(sp.done)
		_ = sp.up.Run(ctx)
	}()
}

// update hands cluster c's new complete state to its uplink.
func (s *spokes) update(c int, objs []*meshconfig.Object) {
	s.list[c].desired = len(objs)
	s.list[c].up.Update(objs)
}

// stop ends cluster c's uplink (its stream closes).
func (s *spokes) stop(c int) {
	sp := s.list[c]
	if sp.cancel != nil {
		sp.cancel()
		<-sp.done
		sp.cancel = nil
	}
}

func (s *spokes) stopAll() {
	for c := range s.list {
		s.stop(c)
	}
}

// synced reports whether cluster c's uplink reached synced and the hub
// ACKed every desired object; an error if the hub refused any.
func (s *spokes) synced(c int) (bool, error) {
	st := s.list[c].up.Status()
	if len(st.Nacked) > 0 {
		n := st.Nacked[0]
		return false, fmt.Errorf("the hub refused %d objects of cluster %s, e.g. %s %s: %s", len(st.Nacked), st.Cluster, n.Kind, n.Name, n.Reason)
	}
	return st.State == uplink.StateSynced && st.Acked == st.Desired && st.Desired == s.list[c].desired, nil
}

// waitSynced waits until every cluster is synced.
func (s *spokes) waitSynced(ctx context.Context, deadline time.Duration) error {
	return poll(ctx, deadline, 20*time.Millisecond, func() error {
		for c := range s.list {
			ok, err := s.synced(c)
			if err != nil {
				return permanent{err}
			}
			if !ok {
				st := s.list[c].up.Status()
				return fmt.Errorf("cluster %s: uplink %s, %d of %d objects ACKed (last error %q)", st.Cluster, st.State, st.Acked, st.Desired, st.LastErr)
			}
		}
		return nil
	})
}

// permanent is an error poll does not retry.
type permanent struct{ error }

// poll calls fn every interval until it returns nil, a permanent error,
// or deadline passes (its last error is returned).
func poll(ctx context.Context, deadline, interval time.Duration, fn func() error) error {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if p, ok := err.(permanent); ok {
			return p.error
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %s: %w", deadline, err)
		case <-time.After(interval):
		}
	}
}
