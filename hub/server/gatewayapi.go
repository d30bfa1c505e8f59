package server

import (
	"reflect"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/xds/pushctx"
)

// gatewayAPIStatuses serves each cluster the statuses of its Gateway API
// objects on Watch, from the mesh's newest published snapshot, and tells
// the Watch server when a publish changed them. Safe for concurrent use.
type gatewayAPIStatuses struct {
	current func(mesh string) *pushctx.State
	notify  func(mesh string)

	mu   sync.Mutex
	last map[string]map[string][]*meshconfigv1.GatewayAPIStatus // mesh -> the last published statuses
}

// of returns cluster's statuses in mesh (watch.Options.GatewayAPIStatus).
func (g *gatewayAPIStatuses) of(mesh, cluster string) []*meshconfigv1.GatewayAPIStatus {
	st := g.current(mesh)
	if st == nil {
		return nil
	}
	return st.Snapshot.GatewayAPIStatuses[cluster]
}

// published notifies the Watch streams of st's mesh when its statuses
// differ from the previous publish's (pushctx.Options.OnPublish).
func (g *gatewayAPIStatuses) published(st *pushctx.State) {
	next := st.Snapshot.GatewayAPIStatuses
	g.mu.Lock()
	prev, seen := g.last[st.Mesh]
	if g.last == nil {
		g.last = map[string]map[string][]*meshconfigv1.GatewayAPIStatus{}
	}
	g.last[st.Mesh] = next
	g.mu.Unlock()
	if seen && sameStatuses(prev, next) {
		return
	}
	g.notify(st.Mesh)
}

// forget drops what is kept of a mesh no longer served.
func (g *gatewayAPIStatuses) forget(mesh string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.last, mesh)
}

func sameStatuses(a, b map[string][]*meshconfigv1.GatewayAPIStatus) bool {
	if reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() {
		return true
	}
	if len(a) != len(b) {
		return false
	}
	for c, list := range a {
		if !slices.EqualFunc(list, b[c], func(x, y *meshconfigv1.GatewayAPIStatus) bool { return proto.Equal(x, y) }) {
			return false
		}
	}
	return true
}
