package envoy

import (
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// generate is gen.Envoy (gen imports this package, so this package's own
// tests cannot import gen).
func generate(s *mesh.Snapshot, key proxy.Key) *build.Output {
	return Generate(scope.New(s, key), typeurl.Cluster, typeurl.Endpoint, typeurl.Listener, typeurl.Route)
}
