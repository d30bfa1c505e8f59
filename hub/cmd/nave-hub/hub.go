// Command nave-hub is the central control plane: it takes spokes' Push
// streams, merges each mesh's clusters and serves xDS to proxies. The
// composition lives in hub/server.
package main

import (
	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/server"
	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/program"
)

func main() {
	program.Main(hubconfig.Program, func(c *hubconfig.Config) logging.Config { return c.Log }, server.Serve)
}
