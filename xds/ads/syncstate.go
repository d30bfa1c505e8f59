package ads

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// Sync states of one proxy for one type, as istioctl proxy-status names
// them (navectl proxy-status, the hub's status page).
const (
	SyncSynced  = "SYNCED"   // the proxy ACKed the last version sent
	SyncNotSent = "NOT SENT" // nothing of this type was sent
	SyncStale   = "STALE"    // sent, not answered yet
	SyncNacked  = "NACKED"   // the proxy refused the last version sent
)

// SyncState is the proxy's state for this type: one of the Sync constants.
func (ts TypeStatus) SyncState() string {
	switch {
	case ts.SentVersion == "":
		return SyncNotSent
	case ts.NackedVersion != "" && ts.NackedVersion == ts.SentVersion:
		return SyncNacked
	case ts.AckedVersion == ts.SentVersion:
		return SyncSynced
	}
	return SyncStale
}

// syncStateLabels are the sync states as metric label values.
var syncStateLabels = []struct{ state, label string }{
	{SyncSynced, "synced"}, {SyncNotSent, "not_sent"}, {SyncStale, "stale"}, {SyncNacked, "nacked"},
}

// syncStateCollector counts connected proxies per mesh, type and sync
// state, from the status the hub keeps for /debug/syncz, at each scrape.
type syncStateCollector struct {
	status func() []ConnStatus
	desc   *prometheus.Desc
}

// SyncStateCollector returns the collector of nave_xds_proxy_sync_states:
// connected proxies by mesh, xDS type (of those each subscribed to) and
// sync state, counted at each scrape. Every state of a (mesh, type) seen is
// reported, 0 included.
func (s *Server) SyncStateCollector() prometheus.Collector {
	return newSyncStateCollector(s.Status)
}

func newSyncStateCollector(status func() []ConnStatus) *syncStateCollector {
	return &syncStateCollector{status: status, desc: prometheus.NewDesc("nave_xds_proxy_sync_states",
		"Connected proxies by mesh, xDS type and sync state (synced, not_sent, stale, nacked), as navectl proxy-status names them.",
		[]string{"mesh", "type", "state"}, nil)}
}

func (c *syncStateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *syncStateCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ mesh, typ string }
	counts := map[key]map[string]int{}
	for _, p := range c.status() {
		for typ, ts := range p.Types {
			k := key{p.Mesh, typ}
			if counts[k] == nil {
				counts[k] = map[string]int{}
			}
			counts[k][ts.SyncState()]++
		}
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].mesh < keys[j].mesh || keys[i].mesh == keys[j].mesh && keys[i].typ < keys[j].typ
	})
	for _, k := range keys {
		for _, s := range syncStateLabels {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[k][s.state]), k.mesh, k.typ, s.label)
		}
	}
}
