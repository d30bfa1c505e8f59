package ads_test

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// hostedSet is a set of meshes a test changes while the server runs.
type hostedSet struct {
	mu     sync.Mutex
	meshes []string
}

func (h *hostedSet) Hosted(m string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.meshes, m)
}

func (h *hostedSet) Names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.meshes)
}

func (h *hostedSet) remove(m string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.meshes = slices.DeleteFunc(h.meshes, func(x string) bool { return x == m })
}

// A mesh the hub stops serving loses its streams at CloseMesh and cannot
// open new ones; another mesh's streams go on.
func TestCloseMeshEndsItsStreamsAndHostedRefusesNewOnes(t *testing.T) {
	hosted := &hostedSet{meshes: []string{"m", "m2"}}
	f := newFixture(t, nil, func(o *ads.Options) { o.Hosted, o.HostedNames = hosted.Hosted, hosted.Names })
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	f.set(t, "m2", synced("c1", pushctxtest.Decode(t, otherYAML)))

	gone := f.connect(t, node("proxy-1", "m2"))
	gone.Subscribe(typeurl.Cluster)
	gone.Next(typeurl.Cluster)
	stays := f.connect(t, node("proxy-2", "m"))
	stays.Subscribe(typeurl.Cluster)
	first := stays.Next(typeurl.Cluster)

	hosted.remove("m2")
	if n := f.ads.CloseMesh("m2", "mesh m2 deleted"); n != 1 {
		t.Errorf("CloseMesh closed %d streams, want 1", n)
	}
	err := gone.Ended()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "mesh m2 deleted") {
		t.Errorf("closed stream ended with %v, want PermissionDenied naming the reason", err)
	}

	again := f.connect(t, node("proxy-3", "m2"))
	again.Subscribe(typeurl.Cluster)
	err = again.Ended()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "not a mesh of this hub (it serves m)") {
		t.Errorf("new stream of the deleted mesh ended with %v, want PermissionDenied listing the meshes served", err)
	}

	// The other mesh is still served: its stream stays, a new one is
	// answered.
	stays.ACK(first)
	if st := f.connStatus(t, "proxy-2"); st.Mesh != "m" {
		t.Errorf("the other mesh's stream: %+v", st)
	}
	other := f.connect(t, node("proxy-4", "m"))
	other.Subscribe(typeurl.Cluster)
	other.Next(typeurl.Cluster)
	if n := f.ads.CloseMesh("m2", "again"); n != 0 {
		t.Errorf("CloseMesh of a mesh with no streams closed %d", n)
	}
}
