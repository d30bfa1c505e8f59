// The load benchmark's scenarios (S1–S4, docs/load-benchmark.md), each a
// method of runner returning one Result.

package load

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// coldConnect (S1): every proxy connects at once to a hub holding the
// whole workload; each one's latency runs from the start of the storm to
// when it first holds everything it asked for (every subscribed type
// answered, every named resource received) and has ACKed it.
func (r *runner) coldConnect(ctx context.Context) (Result, error) {
	p := r.begin("S1")
	t0 := p.start
	var wg sync.WaitGroup
	for _, c := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.start(ctx)
		}()
	}
	wg.Wait()
	err := poll(ctx, r.o.Timeout, 20*time.Millisecond, func() error {
		if err := r.firstError(); err != nil {
			return permanent{err}
		}
		n := 0
		for _, c := range r.clients {
			if !c.CompleteAt().IsZero() {
				n++
			}
		}
		if n < len(r.clients) {
			return fmt.Errorf("%d of %d proxies fully ACKed; %s", n, len(r.clients), r.incomplete())
		}
		return nil
	})
	res := p.end()
	if err != nil {
		return res, err
	}
	samples := make([]float64, 0, len(r.clients))
	sidecars := 0.0
	per := map[string]float64{} // sums over the sidecars
	for _, c := range r.clients {
		samples = append(samples, c.CompleteAt().Sub(t0).Seconds())
		if c.Spec.Kind != Sidecar {
			continue
		}
		sidecars++
		held := c.holds()
		for t := range numTypes {
			per["sidecar_"+TypeNames[t]+"_resources"] += float64(held[t])
		}
		for _, ev := range r.window(c, t0, time.Now()) {
			per["sidecar_"+TypeNames[ev.Type]+"_bytes"] += float64(ev.Bytes)
			per["sidecar_bytes"] += float64(ev.Bytes)
		}
	}
	for k, v := range per {
		res.Extra[k] = v / max(sidecars, 1)
	}
	res.Extra["sidecars"] = sidecars
	res.Extra["complete"] = float64(len(samples))
	res.Extra["hub_acked"] = float64(r.hubAcked(ctx))
	res.Extra["load_seconds"] = r.loaded.Seconds()
	for k, v := range r.steady {
		res.Extra["steady_"+k] = v
	}
	res.Latency = newStats(samples)
	return res, nil
}

// hubAcked asks the hub (/debug/syncz) how many proxies have ACKed every
// version it sent them, NACKed none, and have nothing pending: the hub's
// side of "fully ACKed". It waits up to 10 s for all to be; -1 if the
// view cannot be read.
func (r *runner) hubAcked(ctx context.Context) int {
	n := -1
	_ = poll(ctx, 10*time.Second, 100*time.Millisecond, func() error {
		n = 0
		for _, h := range r.hubs {
			var conns syncView
			if err := h.getJSON("/debug/syncz", &conns); err != nil {
				return err
			}
			n += fullyAcked(conns)
		}
		if n < len(r.clients) {
			return fmt.Errorf("%d of %d", n, len(r.clients))
		}
		return nil
	})
	return n
}

// syncView is the part of /debug/syncz hubAcked reads.
type syncView []struct {
	Types map[string]struct {
		AckedVersion  string `json:"ackedVersion"`
		NackedVersion string `json:"nackedVersion"`
		Pending       bool   `json:"pending"`
	} `json:"types"`
}

// fullyAcked counts the connections of a hub that ACKed everything.
func fullyAcked(conns syncView) int {
	n := 0
	for _, c := range conns {
		ok := len(c.Types) > 0
		for _, t := range c.Types {
			ok = ok && !t.Pending && t.AckedVersion != "" && t.NackedVersion == ""
		}
		if ok {
			n++
		}
	}
	return n
}

// incomplete describes one proxy that does not hold everything yet.
func (r *runner) incomplete() string {
	for _, c := range r.clients {
		if !c.CompleteAt().IsZero() {
			continue
		}
		c.mu.Lock()
		var parts []string
		for t := range c.ts {
			ts := &c.ts[t]
			if !ts.requested {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s answered=%v want=%d have=%d absent=%d", TypeNames[t], ts.answered, ts.want.count(), ts.have.count(), ts.absent.count()))
		}
		c.mu.Unlock()
		return fmt.Sprintf("e.g. %s (%s): %s", c.Spec.Node.GetId(), c.Spec.Kind, strings.Join(parts, ", "))
	}
	return ""
}

// fanOut (S2): one edit (the edited service's DestinationRule) that
// changes a cluster every proxy that sees the service holds; latency from
// handing it to the spoke to each holder's ACK of the response carrying
// the changed cluster. Notes count the proxies that received anything:
// with Sidecar scoping (S5) only the holders should.
func (r *runner) fanOut(ctx context.Context) (Result, error) {
	id := r.env.names.idString(r.w.ClusterName(r.w.edited))
	p := r.begin("S2")
	var samples []float64
	holdersTotal, reached := 0, 0
	for range r.o.FanOutEdits {
		before := make([]watch, len(r.clients))
		var holders []int
		for i, c := range r.clients {
			before[i] = c.watchState(id)
			if before[i].hash != 0 {
				holders = append(holders, i)
			}
		}
		holdersTotal += len(holders)
		t0 := time.Now()
		r.spokes.update(0, r.w.EditFanOut())
		err := poll(ctx, r.o.Timeout, 10*time.Millisecond, func() error {
			if err := r.firstError(); err != nil {
				return permanent{err}
			}
			missing := 0
			for _, i := range holders {
				if w := r.clients[i].watchState(id); w.changes == before[i].changes || w.ackAt.IsZero() {
					missing++
				}
			}
			if missing > 0 {
				return fmt.Errorf("%d of %d proxies have not ACKed the edit", missing, len(holders))
			}
			return nil
		})
		for _, i := range holders {
			if w := r.clients[i].watchState(id); w.changes > before[i].changes && !w.ackAt.IsZero() {
				samples = append(samples, w.ackAt.Sub(t0).Seconds())
				reached++
			}
		}
		if err != nil {
			p.end()
			return Result{}, err
		}
		if err := r.waitQuiet(ctx, r.o.Settle); err != nil {
			p.end()
			return Result{}, err
		}
	}
	res := p.end()
	for _, c := range r.clients {
		if len(r.window(c, p.start, time.Now())) > 0 {
			res.Extra["proxies_received"]++
		}
	}
	edits := float64(r.o.FanOutEdits)
	per := edits * float64(len(r.clients))
	res.Extra["edits"] = edits
	res.Extra["holders"] = float64(holdersTotal) / edits
	res.Extra["reached"] = float64(reached) / edits
	res.Extra["bytes_per_proxy"] = res.Bytes / per
	for t, tc := range res.ByType {
		res.Extra["responses_per_proxy"] += tc.Responses / per
		res.Extra["resources_per_proxy"] += tc.Resources / per
		res.Extra[t+"_resources_per_proxy"] = tc.Resources / per
	}
	res.Latency = newStats(samples)
	return res, nil
}

// churn (S3): endpoint moves at ChurnRate across the clusters (round
// robin) for ChurnDuration, each a WorkloadEntry given an address never
// used before; latency from handing the move to the spoke to each
// affected proxy's ACK of the EDS response that first carries the address.
// A proxy is affected by a move if it subscribes to the service's EDS
// cluster when the move is made.
func (r *runner) churn(ctx context.Context) (Result, error) {
	nc := len(r.w.Clusters)
	perm := make([][]int, nc)
	next := make([]int, nc)
	for c := range perm {
		perm[c] = rand.New(rand.NewPCG(uint64(c), 42)).Perm(r.w.Services * r.w.EndpointsPerCluster)
	}
	affected := make([]int, len(r.clients))
	var moves []*marker
	expected := 0
	n := max(1, int(math.Round(r.o.ChurnRate*r.o.ChurnDuration.Seconds())))
	p := r.begin("S3")
	start := p.start
	var first, lastMove time.Time
	for i := range n {
		at := start.Add(time.Duration(float64(i) / r.o.ChurnRate * float64(time.Second)))
		select {
		case <-ctx.Done():
			p.end()
			return Result{}, ctx.Err()
		case <-time.After(time.Until(at)):
		}
		c := i % nc
		k := perm[c][next[c]%len(perm[c])]
		next[c]++
		mv, objs := r.w.MoveEndpoint(k/r.w.EndpointsPerCluster, c, k%r.w.EndpointsPerCluster)
		id := r.env.names.idString(r.w.ClusterName(mv.Service))
		for j, cl := range r.clients {
			if cl.subscribed(typeEDS, id) {
				affected[j]++
				expected++
			}
		}
		mk := &marker{seq: int32(len(moves)), needle: needle(mv.Address), at: time.Now()}
		if i == 0 {
			first = mk.at
		}
		lastMove = mk.at
		moves = append(moves, mk)
		r.env.markers.add(id, mk)
		r.spokes.update(c, objs)
	}
	observed := func() int {
		n := 0
		for _, c := range r.clients {
			c.mu.Lock()
			n += len(c.observed)
			c.mu.Unlock()
		}
		return n
	}
	last, progress := -1, time.Now()
	err := poll(ctx, r.o.Timeout, 50*time.Millisecond, func() error {
		if err := r.firstError(); err != nil {
			return permanent{err}
		}
		n := observed()
		if n >= expected {
			return nil
		}
		if n != last {
			last, progress = n, time.Now()
		}
		if time.Since(progress) > 15*time.Second {
			return nil // no progress: what is missing will not come
		}
		return fmt.Errorf("%d of %d endpoint moves seen by the affected proxies", n, expected)
	})
	res := p.end()
	r.env.markers.clear()
	if err != nil {
		return res, err
	}
	var samples []float64
	unaffected := 0.0
	for j, c := range r.clients {
		c.mu.Lock()
		for _, o := range c.observed {
			samples = append(samples, o.ackAt.Sub(moves[o.seq].at).Seconds())
		}
		c.mu.Unlock()
		evs := r.window(c, start, time.Now())
		if affected[j] == 0 {
			unaffected++
			res.Extra["unaffected_responses"] += float64(len(evs))
		}
		for _, ev := range evs {
			if ev.Type != typeEDS {
				res.Extra["other_responses"]++
				continue
			}
			res.Extra["eds_responses"]++
			res.Extra["eds_resources"] += float64(ev.Resources)
			if ev.Markers == 0 {
				res.Extra["eds_responses_unneeded"]++
			}
		}
	}
	res.Extra["moves"] = float64(len(moves))
	res.Extra["rate"] = r.o.ChurnRate
	if len(moves) > 1 {
		res.Extra["rate"] = float64(len(moves)-1) / lastMove.Sub(first).Seconds() // as achieved
	}
	res.Extra["expected"] = float64(expected)
	res.Extra["observed"] = float64(len(samples))
	res.Extra["missed"] = float64(expected - len(samples))
	res.Extra["unaffected_proxies"] = unaffected
	if n := res.Extra["eds_responses"]; n > 0 {
		res.Extra["eds_resources_per_response"] = res.Extra["eds_resources"] / n
	}
	res.Latency = newStats(samples)
	return res, nil
}

// endAfterQuiet watches for FlapQuiet more, unless err (the scenario's)
// is set, then ends the probe.
func (p *probe) endAfterQuiet(ctx context.Context, err error) (Result, error) {
	if err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(p.r.o.FlapQuiet):
		}
	}
	return p.end(), err
}

// flap (S4): the last FlapClusters clusters' uplinks stop at once for
// FlapOutage and start again with the same state; counts what the proxies
// received from the stop until FlapQuiet after every one resynced
// (target: nothing).
func (r *runner) flap(ctx context.Context) (Result, error) {
	var flapped []int
	for c := max(0, len(r.w.Clusters)-r.o.FlapClusters); c < len(r.w.Clusters); c++ {
		flapped = append(flapped, c)
	}
	p := r.begin("S4")
	for _, c := range flapped {
		r.spokes.stop(c)
	}
	disconnected := map[string]bool{} // clusters a hub saw go
	deadline := p.start.Add(r.o.FlapOutage)
	for time.Now().Before(deadline) {
		for _, c := range flapped {
			name := r.w.Clusters[c]
			if disconnected[name] {
				continue
			}
			var list []struct {
				Cluster   string `json:"cluster"`
				Connected bool   `json:"connected"`
			}
			if r.hubs[c%len(r.hubs)].getJSON("/debug/spokes", &list) == nil { // its spoke's replica
				for _, s := range list {
					if s.Cluster == name && !s.Connected {
						disconnected[name] = true
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			p.end()
			return Result{}, ctx.Err()
		case <-time.After(min(100*time.Millisecond, time.Until(deadline))):
		}
	}
	restart := time.Now()
	for _, c := range flapped {
		r.spokes.start(c, r.w.Objects(c))
	}
	err := poll(ctx, r.o.Timeout, 10*time.Millisecond, func() error {
		for _, c := range flapped {
			ok, err := r.spokes.synced(c)
			if err != nil {
				return permanent{err}
			}
			if !ok {
				return fmt.Errorf("cluster %s has not resynced", r.w.Clusters[c])
			}
		}
		return nil
	})
	resync := time.Since(restart)
	res, err := p.endAfterQuiet(ctx, err)
	if err != nil {
		return res, err
	}
	for _, tc := range res.ByType {
		res.Extra["responses"] += tc.Responses
		res.Extra["resources"] += tc.Resources
		res.Extra["removals"] += tc.Removed
	}
	res.Extra["flapped"] = float64(len(flapped))
	if len(disconnected) == len(flapped) {
		res.Extra["hub_saw_disconnect"] = 1
	}
	res.Extra["resync_seconds"] = resync.Seconds()
	res.Extra["outage_seconds"] = restart.Sub(p.start).Seconds()
	return res, nil
}
