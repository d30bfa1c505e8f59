// Package build holds what every generator room builds with: the Output a
// generation returns (named Resources by type URL and the Problems met),
// the names the rooms and their users refer to resources by (Istio's
// cluster, filter and secret names), the few message forms Envoy and
// proxyless gRPC share (Any, the ADS config source, socket addresses,
// load assignments), and an Encoder that marshals route configurations
// without encoding what their routes share once per route. It imports
// nothing of gen's; every room imports it.
package build

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/xds/mesh"
)

// Resource is one named xDS resource. Its Message is read-only once
// generated: outputs of several proxies may share it. A Resource is a
// plain value, safe to copy and to read from any goroutine.
type Resource struct {
	Name    string
	Message proto.Message
	// Wire is Message's deterministic encoding when its generator made
	// it (an Encoder's, byte for byte what proto.Marshal would give), or
	// nil: resource.Prepare then marshals Message. Anything that changes
	// or replaces Message (an EnvoyFilter patch) makes a new Resource
	// without it. Read-only.
	Wire []byte
}

// Output is everything generated for one proxy (Envoy) or one snapshot
// (proxyless gRPC). It is read-only once returned, and then safe to read
// from any number of goroutines.
type Output struct {
	// Resources by type URL, each sorted by name.
	Resources map[string][]Resource
	// Problems lists config that could not be applied as written.
	Problems []mesh.Problem
	// PatchFailures counts the EnvoyFilter patches that failed on a
	// resource (each also a Problem); the resource was sent unpatched.
	PatchFailures int
}

// SortByName sorts rs by name, as Output.Resources holds them.
func SortByName(rs []Resource) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
}

// Problems records config that could not be applied as written, each
// problem once, in the order first met. The zero value is empty and
// ready to use. A Problems belongs to one goroutine.
type Problems struct {
	list []mesh.Problem
	seen map[mesh.Problem]bool
}

// Add records p unless it is recorded already.
func (ps *Problems) Add(p mesh.Problem) {
	if ps.seen == nil {
		ps.seen = map[mesh.Problem]bool{}
	}
	if !ps.seen[p] {
		ps.seen[p] = true
		ps.list = append(ps.list, p)
	}
}

// Addf records that field of resource could not be applied, for the
// reason format says.
func (ps *Problems) Addf(resource, field, format string, args ...any) {
	ps.Add(mesh.Problem{Resource: resource, Field: field, Reason: fmt.Sprintf(format, args...)})
}

// List returns the problems recorded so far (nil for none), in the order
// first met.
func (ps *Problems) List() []mesh.Problem { return ps.list }
