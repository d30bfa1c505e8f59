package load

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Forwarder is a loopback TCP forwarder in front of hub replicas, as a
// Service address is: each connection goes to the first of its backends
// that accepts (with round robin, starting at the next backend each
// time). A replica-mode spoke dials one, so that it re-homes when its
// replica dies; the e2e replica tests put them in front of spokes and
// proxies. Safe for concurrent use.
type Forwarder struct {
	lis        net.Listener
	mu         sync.Mutex
	backends   []string
	conns      map[net.Conn]bool
	roundRobin bool
	next       int
}

// NewForwarder listens on a free loopback port and forwards to backends
// (host:port). Callers must Close it.
func NewForwarder(backends ...string) (*Forwarder, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Forwarder{lis: lis, backends: backends, conns: map[net.Conn]bool{}}
	go f.serve()
	return f, nil
}

// Addr is the forwarder's host:port.
func (f *Forwarder) Addr() string { return f.lis.Addr().String() }

// SetRoundRobin makes each new connection try the backends starting at
// the next one, as a round-robin load balancer does.
func (f *Forwarder) SetRoundRobin(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roundRobin = on
}

// Close stops listening and closes every forwarded connection.
func (f *Forwarder) Close() {
	f.lis.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
	}
}

func (f *Forwarder) track(on bool, cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		if on {
			f.conns[c] = true
		} else {
			delete(f.conns, c)
		}
	}
}

func (f *Forwarder) serve() {
	for {
		in, err := f.lis.Accept()
		if err != nil {
			return
		}
		go func() {
			f.mu.Lock()
			backends := append([]string(nil), f.backends...)
			if f.roundRobin {
				f.next = (f.next + 1) % len(backends)
				backends = append(backends[f.next:], backends[:f.next]...)
			}
			f.mu.Unlock()
			var out net.Conn
			for _, b := range backends {
				if out, err = net.DialTimeout("tcp", b, time.Second); err == nil {
					break
				}
			}
			if out == nil {
				in.Close()
				return
			}
			f.track(true, in, out)
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				done <- struct{}{}
			}
			go pipe(out, in)
			go pipe(in, out)
			<-done
			in.Close()
			out.Close()
			f.track(false, in, out)
		}()
	}
}

// ReconnectDelay is how long a proxy of a killed replica waits before it
// reconnects to another (F1), as the e2e failover tests' clients do.
const ReconnectDelay = 100 * time.Millisecond

// failover (F1, replica mode only): the last replica is killed (SIGKILL)
// with the set holding the workload and every proxy converged. Measured
// from the kill: when a peer's membership drops it (failure detection),
// when the spoke it owned is synced again on another replica through
// the forwarder (re-home), and, per proxy of the dead replica, when a new
// stream with the same node, opened ReconnectDelay after the kill on a
// surviving replica (round robin; with Options.SpreadByNamespace the
// next of its home order, as its bootstrap's priorities), holds
// everything and has ACKed it (reconnect-to-ACK, the latency). Notes:
// what the other proxies received meanwhile (target: no removal).
func (r *runner) failover(ctx context.Context) (Result, error) {
	n := len(r.hubs)
	victim := n - 1
	var survivors []*Hub
	for i, h := range r.hubs {
		if i != victim {
			survivors = append(survivors, h)
		}
	}
	r.dead = map[int]bool{victim: true}
	p := r.begin("F1")
	kill := time.Now()
	if err := syscall.Kill(r.hubs[victim].PID, syscall.SIGKILL); err != nil {
		p.end()
		return Result{}, fmt.Errorf("killing replica %s: %w", ReplicaID(victim), err)
	}

	var wg sync.WaitGroup
	var detect, rehome time.Duration
	var detectErr, rehomeErr error
	wg.Add(2)
	go func() { // failure detection, as replica 0 sees it
		defer wg.Done()
		detectErr = poll(ctx, r.o.Timeout, 20*time.Millisecond, func() error {
			var v struct {
				Members []struct {
					ID string `json:"id"`
				} `json:"members"`
			}
			if err := r.hubs[0].getJSON("/debug/replicas", &v); err != nil {
				return err
			}
			for _, m := range v.Members {
				if m.ID == ReplicaID(victim) {
					return fmt.Errorf("%s still sees %s", ReplicaID(0), ReplicaID(victim))
				}
			}
			return nil
		})
		detect = time.Since(kill)
	}()
	go func() { // re-home of the dead replica's spokes
		defer wg.Done()
		left := map[int]bool{}
		rehomeErr = poll(ctx, r.o.Timeout, 2*time.Millisecond, func() error {
			for c := range r.spokes.list {
				if c%n != victim {
					continue
				}
				ok, err := r.spokes.synced(c)
				if err != nil {
					return permanent{err}
				}
				if !ok {
					left[c] = true
				}
				if !left[c] || !ok {
					return fmt.Errorf("cluster %s has not re-homed", r.w.Clusters[c])
				}
			}
			return nil
		})
		rehome = time.Since(kill)
	}()

	// The dead replica's proxies reconnect to the survivors.
	var moved []int
	for i, c := range r.clients {
		if c.replica == victim {
			moved = append(moved, i)
		}
	}
	for _, i := range moved {
		r.clients[i].close()
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(kill.Add(ReconnectDelay))):
	}
	for k, i := range moved {
		to := k % len(survivors)
		if to >= victim {
			to++
		}
		if r.o.SpreadByNamespace {
			// As the bootstrap's priorities: the next replica of the
			// proxy's home order.
			for _, h := range r.homeOrder(r.clients[i].Spec) {
				if h != victim {
					to = h
					break
				}
			}
		}
		c, err := newClient(r.env, r.clients[i].Spec, r.o.Delta, r.hubs[to].XDS)
		if err != nil {
			p.end()
			return Result{}, err
		}
		c.replica = to
		r.clients[i] = c
		go c.start(ctx)
	}
	err := poll(ctx, r.o.Timeout, 10*time.Millisecond, func() error {
		if err := r.firstError(); err != nil {
			return permanent{err}
		}
		done := 0
		for _, i := range moved {
			if !r.clients[i].CompleteAt().IsZero() {
				done++
			}
		}
		if done < len(moved) {
			return fmt.Errorf("%d of %d reconnected proxies fully ACKed", done, len(moved))
		}
		return nil
	})
	wg.Wait()
	if err == nil {
		err = detectErr
	}
	if err == nil {
		err = rehomeErr
	}
	res, err := p.endAfterQuiet(ctx, err)
	if err != nil {
		return res, err
	}
	samples := make([]float64, 0, len(moved))
	for _, i := range moved {
		samples = append(samples, r.clients[i].CompleteAt().Sub(kill).Seconds())
	}
	res.Latency = newStats(samples)
	res.Extra["victim"] = float64(victim)
	res.Extra["detect_seconds"] = detect.Seconds()
	res.Extra["rehome_seconds"] = rehome.Seconds()
	res.Extra["reconnected"] = float64(len(moved))
	res.Extra["others_responses"], res.Extra["others_resources"], res.Extra["others_removals"] = 0, 0, 0
	isMoved := map[int]bool{}
	for _, i := range moved {
		isMoved[i] = true
	}
	for i, c := range r.clients {
		if isMoved[i] {
			continue
		}
		for _, ev := range r.window(c, kill, time.Now()) {
			res.Extra["others_responses"]++
			res.Extra["others_resources"] += float64(ev.Resources)
			res.Extra["others_removals"] += float64(ev.Removed)
		}
	}
	return res, nil
}
