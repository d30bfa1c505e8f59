package ads

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/internal/metrictest"
)

func TestSyncState(t *testing.T) {
	for _, c := range []struct {
		ts   TypeStatus
		want string
	}{
		{TypeStatus{}, SyncNotSent},
		{TypeStatus{Subscribed: 2}, SyncNotSent},
		{TypeStatus{SentVersion: "2", AckedVersion: "2"}, SyncSynced},
		{TypeStatus{SentVersion: "2", AckedVersion: "1"}, SyncStale},
		{TypeStatus{SentVersion: "2", AckedVersion: "1", NackedVersion: "2"}, SyncNacked},
		// A NACK of an earlier version, then a newer one sent and ACKed.
		{TypeStatus{SentVersion: "3", AckedVersion: "3", NackedVersion: "2"}, SyncSynced},
		{TypeStatus{SentVersion: "3", AckedVersion: "1", NackedVersion: "2"}, SyncStale},
	} {
		if got := c.ts.SyncState(); got != c.want {
			t.Errorf("%+v: %s, want %s", c.ts, got, c.want)
		}
	}
}

// The collector counts proxies per mesh, type and state at each scrape,
// every state of a (mesh, type) seen included.
func TestSyncStateCollector(t *testing.T) {
	conns := []ConnStatus{
		{Mesh: "acme", Types: map[string]TypeStatus{"Cluster": {SentVersion: "1", AckedVersion: "1"}, "Listener": {SentVersion: "1", NackedVersion: "1"}}},
		{Mesh: "acme", Types: map[string]TypeStatus{"Cluster": {SentVersion: "2", AckedVersion: "1"}}},
		{Mesh: "globex", Types: map[string]TypeStatus{"Cluster": {SentVersion: "1", AckedVersion: "1"}}},
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newSyncStateCollector(func() []ConnStatus { return conns }))
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"mesh", "acme", "type", "Cluster", "state", "synced"}, 1},
		{[]string{"mesh", "acme", "type", "Cluster", "state", "stale"}, 1},
		{[]string{"mesh", "acme", "type", "Listener", "state", "nacked"}, 1},
		{[]string{"mesh", "acme", "type", "Listener", "state", "synced"}, 0},
		{[]string{"mesh", "globex", "type", "Cluster", "state", "synced"}, 1},
		{[]string{"state", "synced"}, 2},
		{[]string{"mesh", "globex", "type", "Listener"}, 0},
	} {
		if got := metrictest.Value(t, reg, "nave_xds_proxy_sync_states", c.labels...); got != c.want {
			t.Errorf("%v: %v, want %v", c.labels, got, c.want)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(families[0].GetMetric()); n != 3*4 {
		t.Errorf("%d series, want 4 states for each of 3 (mesh, type) pairs", n)
	}
	conns = nil
	if families, _ := reg.Gather(); len(families) != 0 {
		t.Errorf("with no proxy connected: %v, want no series", families)
	}
}
