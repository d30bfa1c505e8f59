package server

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/poll"
	"github.com/navemesh/nave/shared/admin"
)

// newPoller dials the spokes of spokes.poll (polled mode); nil when none
// is listed. With TLS the hub presents its serving certificate and ingest
// authenticates the spoke's; with replicas each spoke is dialled by its
// owner only (replica.Membership.OwnsPolled).
func newPoller(cfg hubconfig.Config, sec *security, rep *replicas, in *ingest.Server, adm *admin.Server, log *slog.Logger, reg prometheus.Registerer) *poll.Poller {
	polled, _ := cfg.Spokes.PolledSpokes() // validated at load
	if len(polled) == 0 {
		return nil
	}
	opts := poll.Options{BackoffInitial: cfg.Spokes.PollBackoffInitial, BackoffMax: cfg.Spokes.PollBackoffMax,
		MaxMessageBytes: cfg.Spokes.MaxMessageBytes, Hosted: sec.meshes.Hosted, Logger: log, Registerer: reg}
	for _, p := range polled {
		opts.Targets = append(opts.Targets, poll.Target{ID: ingest.ClusterIdentity{Mesh: p.Mesh, Cluster: p.Cluster}, Address: p.Address})
	}
	if !sec.plaintext {
		opts.TLS = sec.serving.ClientConfig()
	}
	if rep != nil {
		opts.Mine = func(id ingest.ClusterIdentity) bool {
			m := rep.members.Load()
			return m != nil && m.OwnsPolled(id)
		}
	}
	p := poll.New(in, opts)
	adm.HandleDebug("polled", "the spokes the hub dials (spokes.poll, polled mode): address, state (connecting, streaming, backoff, not-owner, mesh-not-hosted), attempts, failures, last error", func(*http.Request) (any, error) {
		return p.Status(), nil
	})
	return p
}
