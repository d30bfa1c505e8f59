package integration

import "github.com/navemesh/nave/hub/ingest"

// hubIngest is a hub's ingest in these tests, trusting the (mesh, cluster)
// a spoke claims: its Store (embedded: what a test reads, a pushctx and
// watch Source) and the Server and Ownership in front of it.
type hubIngest struct {
	*ingest.Store
	srv *ingest.Server
	own *ingest.Ownership
}

func newHubIngest(opts ingest.StoreOptions, sopts ingest.ServerOptions) *hubIngest {
	st := ingest.NewStore(opts)
	srv := ingest.NewServer(st, ingest.ClaimedIdentity(), sopts)
	return &hubIngest{Store: st, srv: srv, own: ingest.NewOwnership(srv)}
}

// held returns id as held, without its resources.
func (h *hubIngest) held(id ingest.ClusterIdentity) (ingest.Holding, bool) {
	hs := h.own.Holdings(ingest.HoldingFilter{Only: id})
	if len(hs) == 0 {
		return ingest.Holding{}, false
	}
	return hs[0], true
}
