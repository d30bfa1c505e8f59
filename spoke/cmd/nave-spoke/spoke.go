// Command nave-spoke is the per-cluster control plane: it watches its
// cluster's config and pushes it to the hub over a stream it dials, proving
// which (mesh, cluster) it is with a certificate it gets by enrolling (see
// docs/enrollment.md). With the kubernetes source it can also serve the
// cluster's validation webhook (webhook.listen, docs/webhooks.md) and
// sidecar injector (inject.enabled, docs/injection.md). The composition
// lives in spoke/server.
package main

import (
	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/program"
	"github.com/navemesh/nave/spoke/server"
	"github.com/navemesh/nave/spoke/spokeconfig"
)

func main() {
	program.Main(spokeconfig.Program, func(c *spokeconfig.Config) logging.Config { return c.Log }, server.Serve)
}
