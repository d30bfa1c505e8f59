package ads

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/resource"
)

// Incremental (delta) ADS, after Envoy's xDS protocol ("Incremental xDS"):
// the proxy subscribes and unsubscribes names per type ("*" is the wildcard;
// a first request naming nothing is the legacy wildcard), and each response
// carries only resources whose content changed since the proxy last got
// them, plus removed_resources for those it holds that are gone. A
// subscribed name that does not exist is reported once in
// removed_resources, which tells the client it does not exist. Every
// response has a fresh nonce; the proxy ACKs or NACKs nonces. After a NACK
// the proxy keeps its previous resources and the rejected versions are not
// sent again: only newer content is.

func (c *conn) handleDelta(stream deltaStream, st resource.State, req *discoveryv3.DeltaDiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	if typeURL == typeurl.Secret && !c.nds {
		return c.handleSecretsDelta(stream, req)
	}
	if !c.serves(typeURL) {
		c.server.log.Debug("delta request for a type this hub does not serve on this stream", "conn", c.id, "type", typeURL)
		return nil
	}
	c.mu.Lock()
	ts := c.types[typeURL]
	if ts == nil {
		ts = &typeState{names: map[string]bool{}, sentHashes: map[string]string{}, pending: map[string]pendingResponse{}, absent: map[string]bool{}}
		c.types[typeURL] = ts
	}
	first := !ts.requested
	ts.requested = true
	if first {
		// A reconnecting proxy says what it already has; only what differs is sent.
		for n, v := range req.GetInitialResourceVersions() {
			ts.sentHashes[n] = v
		}
	}
	if nonce := req.GetResponseNonce(); nonce != "" {
		if nonce == ts.nonce {
			c.answered(ts)
		}
		c.settle(ts, typeURL, nonce, req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
	}
	changed := ts.subscribeDelta(sharedNames, req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), first)
	if first || changed {
		ts.synced = 0
	}
	c.mu.Unlock()
	if first || changed {
		return c.pushDelta(stream, st, typeURL, true)
	}
	return nil
}

// settle records the proxy's ACK or NACK of nonce. Nonces are sent in
// increasing order, and one answer settles every earlier nonce too.
func (c *conn) settle(ts *typeState, typeURL, nonce, reason string, nack bool) {
	p, ok := ts.pending[nonce]
	version := p.version
	if !ok {
		return // unknown or already settled
	}
	n, _ := strconv.ParseUint(nonce, 10, 64)
	for k := range ts.pending {
		if m, _ := strconv.ParseUint(k, 10, 64); m <= n {
			delete(ts.pending, k)
		}
	}
	if nack {
		ts.nacked, ts.nackReason = version, reason
		c.server.metrics.nacks.WithLabelValues(typeurl.Short(typeURL)).Inc()
		c.server.log.Warn("proxy rejected config", "conn", c.id, "type", typeurl.Short(typeURL), "version", version, "reason", reason)
		return
	}
	ts.acked = version
	ts.nacked, ts.nackReason = "", ""
	c.converged(typeURL, p.changedAt)
}

// subscribeDelta applies a request's subscription changes and reports
// whether there may be something new to send. The names subscribed to
// become a set shared with the streams subscribed to the same names
// (sets, as SotW subscriptions are): a change copies it first.
func (ts *typeState) subscribeDelta(sets *nameSets, sub, unsub []string, first bool) bool {
	changed, namesChanged := false, false
	own := func() {
		if ts.sub != nil {
			ts.names, ts.sub = maps.Clone(ts.names), nil
		}
		namesChanged = true
	}
	if first && len(sub) == 0 {
		ts.wildcard, changed = true, true
	}
	for _, n := range sub {
		if n == "*" {
			changed = changed || !ts.wildcard
			ts.wildcard = true
			continue
		}
		if !ts.names[n] {
			own()
			ts.names[n], changed = true, true
		}
	}
	if len(unsub) > 0 {
		ts.ownHashes()
	}
	for _, n := range unsub {
		if n == "*" {
			// What only the wildcard covered is no longer the proxy's.
			ts.wildcard = false
			for held := range ts.sentHashes {
				if !ts.names[held] {
					delete(ts.sentHashes, held)
				}
			}
			continue
		}
		if ts.names[n] {
			own()
			delete(ts.names, n)
		}
		// The proxy drops what it unsubscribed from; a later subscription
		// sends it again.
		delete(ts.sentHashes, n)
		delete(ts.absent, n)
	}
	if namesChanged && len(ts.names) > 0 {
		s := sets.get(slices.Sorted(maps.Keys(ts.names)))
		ts.sub, ts.names = s, s.set
	}
	return changed
}

func (c *conn) pushAllDelta(stream deltaStream, st resource.State) error {
	for _, typeURL := range typeOrder(c) {
		if err := c.pushDelta(stream, st, typeURL, false); err != nil {
			return err
		}
	}
	return nil
}

// ownHashes makes sentHashes the stream's own before it is changed (it
// may be a result set's shared map; see sharedHashes).
func (ts *typeState) ownHashes() {
	if ts.sharedHashes {
		ts.sentHashes, ts.sharedHashes = maps.Clone(ts.sentHashes), false
	}
}

// pushDelta sends what changed for typeURL since the proxy last got it.
// The first response of a type is sent even when empty, so a proxy waiting
// for its initial config learns there is none.
func (c *conn) pushDelta(stream deltaStream, st resource.State, typeURL string, request bool) error {
	if st == nil {
		return nil // the mesh is not ready; the request is answered once it is
	}
	res := c.resourcesOf(st, typeURL)
	all := res.Resources[typeURL]
	c.mu.Lock()
	ts := c.types[typeURL]
	var upd []*resource.Prepared
	var removed []string
	fastChanges, fast := res.ChangesSince(ts.synced, typeURL)
	if !fast && ts.sharedHashes && ts.synced != 0 {
		// The proxy holds all of an unrelated earlier result's set: the
		// difference is computed once for every stream that holds it.
		fastChanges, fast = res.ChangesFrom(ts.synced, typeURL, ts.sentHashes), true
	}
	fast = fast && !request && ts.answered
	if fast {
		ch := fastChanges
		// The proxy holds what it subscribes to of the result res was
		// derived from (or of res): only what changed since can differ.
		for _, p := range ch.Updated {
			if ts.wildcard || ts.names[p.Name] {
				upd = append(upd, p)
			}
		}
		for _, n := range ch.Removed {
			if _, held := ts.sentHashes[n]; held {
				removed = append(removed, n)
			}
		}
	} else {
		if ts.wildcard {
			for _, p := range all {
				if ts.sentHashes[p.Name] != p.Hash {
					upd = append(upd, p)
				}
			}
		}
		for n := range ts.names {
			p, ok := all[n]
			switch {
			case ok && !ts.wildcard && ts.sentHashes[n] != p.Hash:
				upd = append(upd, p)
			case !ok && !ts.absent[n]:
				if _, held := ts.sentHashes[n]; !held {
					removed = append(removed, n) // does not exist: say so once
				}
			}
		}
		for n := range ts.sentHashes {
			if _, ok := all[n]; !ok {
				removed = append(removed, n)
			}
		}
	}
	// Once this push is sent the proxy holds exactly what it subscribes to
	// of res (see typeState.synced).
	ts.synced = res.ID()
	if len(upd) == 0 && len(removed) == 0 && ts.answered {
		c.mu.Unlock()
		return nil
	}
	// What the proxy holds: when that is all of a result's set, the set's
	// own (read-only) map stands for it rather than a copy per stream.
	set := res.Set(typeURL)
	if ts.sharedHashes && fast && len(upd) == len(fastChanges.Updated) && len(removed) == len(fastChanges.Removed) {
		ts.sentHashes = set.Hashes // held all of the base's set, got every change
	} else {
		ts.ownHashes()
		for _, p := range upd {
			ts.sentHashes[p.Name] = p.Hash
		}
		for _, n := range removed {
			delete(ts.sentHashes, n)
		}
	}
	for _, p := range upd {
		delete(ts.absent, p.Name)
	}
	for _, n := range removed {
		if ts.names[n] {
			ts.absent[n] = true
		}
	}
	// It holds nothing res lacks, so as many as res's set is all of it.
	if !ts.sharedHashes && len(set.Hashes) == len(ts.sentHashes) {
		ts.sentHashes, ts.sharedHashes = set.Hashes, true
	}
	sort.Slice(upd, func(i, j int) bool { return upd[i].Name < upd[j].Name })
	sort.Strings(removed)
	c.nonce++
	nonce := strconv.FormatUint(c.nonce, 10)
	var version string
	if ts.sharedHashes {
		version = set.Version
	} else {
		version = resource.SetVersion(ts.sentHashes)
	}
	ts.answered = true
	ts.nonce, ts.sentVersion, ts.sentAt = nonce, version, time.Now()
	pr := pendingResponse{version: version}
	if !request {
		pr.changedAt = st.ChangedAt()
	}
	ts.pending[nonce] = pr
	c.mu.Unlock()

	resources := make([]*discoveryv3.Resource, len(upd))
	size := 0
	for i, p := range upd {
		resources[i] = &discoveryv3.Resource{Name: p.Name, Version: p.Hash, Resource: p.Any}
		size += len(p.Any.Value)
	}
	resp := &deltaResponse{&discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: version, Resources: resources, RemovedResources: removed,
		TypeUrl: typeURL, Nonce: nonce}, upd}
	release, err := stream.Send(resp)
	if err != nil {
		return err
	}
	c.hold(ts, nonce, release)
	short := typeurl.Short(typeURL)
	c.server.metrics.pushes.WithLabelValues(short, trigger(st, request)).Inc()
	c.server.metrics.bytes.WithLabelValues(short).Add(float64(size))
	c.server.log.Debug("pushed delta", "conn", c.id, "type", short, "version", version, "resources", len(upd), "removed", len(removed), "mesh_version", st.Version())
	return nil
}
