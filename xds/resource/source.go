package resource

import (
	"time"

	"github.com/navemesh/nave/xds/proxy"
)

// Source is what an ADS server serves from: per mesh, the published
// State. Implementations are safe for concurrent use.
type Source interface {
	// Current returns the mesh's published State, or nil while the mesh is
	// not ready, and a channel closed when that answer changes (a newer
	// State is published).
	Current(mesh string) (State, <-chan struct{})
	// Watch registers a stream following mesh until the returned function
	// is called (a source may build a mesh nobody watches lazily).
	Watch(mesh string) (unwatch func())
}

// State is one published state of a mesh as a server sends it: its
// version and what each proxy key receives. Immutable; its methods are
// safe for concurrent use and memoize what they generate.
type State interface {
	// Version orders the mesh's States: a newer State has a larger one.
	Version() uint64
	// ChangedAt is when the first change this State includes was reported
	// (zero for a mesh's first State).
	ChangedAt() time.Time
	// ConfigChanged reports whether config, not only endpoints, changed
	// since the previous State.
	ConfigChanged() bool
	// ForProxy returns what Envoy proxies with key k receive.
	ForProxy(k proxy.Key) *ProxyResources
	// ProxylessFor returns what the proxyless gRPC client with key k
	// receives.
	ProxylessFor(k proxy.Key) *ProxyResources
	// NameTableFor returns the name table (typeurl.NameTable, one
	// resource) of the proxy with key k, which its agent asks for on a
	// stream of its own.
	NameTableFor(k proxy.Key) *ProxyResources
}
