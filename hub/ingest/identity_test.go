package ingest_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// TestHostedMeshesRefusesOtherMeshes checks that a claimed identity is
// accepted only in a mesh the hub hosts, and that a refusal names the mesh
// claimed and the meshes hosted.
func TestHostedMeshesRefusesOtherMeshes(t *testing.T) {
	hosted := []string{"default", "acme"}
	auth := ingest.HostedMeshes(func(m string) bool { return slices.Contains(hosted, m) }, func() []string { return hosted },
		ingest.ClaimedIdentity())
	claim := func(mesh string) (ingest.ClusterIdentity, error) {
		md := metadata.Pairs(protocol.MetadataMesh, mesh, protocol.MetadataCluster, "c1")
		return auth.Authenticate(metadata.NewIncomingContext(context.Background(), md))
	}
	for _, mesh := range []string{"default", "acme"} {
		if id, err := claim(mesh); err != nil || id != (ingest.ClusterIdentity{Mesh: mesh, Cluster: "c1"}) {
			t.Errorf("claim of the hosted mesh %s: %+v, %v", mesh, id, err)
		}
	}
	_, err := claim("rogue")
	if msg := status.Convert(err).Message(); status.Code(err) != codes.PermissionDenied ||
		!strings.Contains(msg, `"rogue"`) || !strings.Contains(msg, "default, acme") {
		t.Errorf("claim of the mesh rogue: %v; want PermissionDenied naming rogue and the hosted meshes", err)
	}
	// The meshes hosted are asked on every stream: one deleted is refused
	// from then on.
	hosted = []string{"default"}
	if _, err := claim("acme"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("claim of a mesh no longer hosted: %v; want PermissionDenied", err)
	}
	// A refusal of the authenticator it wraps stands.
	_, err = auth.Authenticate(context.Background())
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no metadata: %v; want Unauthenticated", err)
	}
}

// TestClaimOfAnotherClusterIsCountedAndServedAsAuthenticated: a stream
// whose certificate says default/c1 but whose metadata claims default/c2
// is served as c1, and counted once.
func TestClaimOfAnotherClusterIsCountedAndServedAsAuthenticated(t *testing.T) {
	asC1 := ingest.AuthenticatorFunc(func(context.Context) (ingest.ClusterIdentity, error) {
		return ingest.ClusterIdentity{Mesh: "default", Cluster: "c1"}, nil
	})
	f := newFixtureAuth(t, time.Minute, asC1)
	own := f.dial(t, "default", "c1")
	own.sync(decode(t, fullState))
	if got := f.metric(t, "nave_hub_spoke_claim_mismatches_total"); got != 0 {
		t.Fatalf("a stream claiming its own cluster counted %v mismatches", got)
	}
	own.close()

	other := f.dial(t, "default", "c2")
	other.sync(decode(t, fullState))
	if _, ok := f.status("default", "c1"); !ok {
		t.Error("the stream was not served as its certificate's cluster c1")
	}
	if _, ok := f.status("default", "c2"); ok {
		t.Error("the stream was served as the cluster it claimed")
	}
	if got := f.metric(t, "nave_hub_spoke_claim_mismatches_total"); got != 1 {
		t.Errorf("nave_hub_spoke_claim_mismatches_total = %v, want 1", got)
	}
}

// pushCtx is a Push server stream of which Relay reads only the context.
type pushCtx struct {
	protocolv1.Sync_PushServer
	ctx context.Context
}

func (p pushCtx) Context() context.Context { return p.ctx }

// TestRelayOfAMeshNotHostedIsRefused: a peer replica that has not yet
// learnt a mesh was deleted cannot relay its clusters here.
func TestRelayOfAMeshNotHostedIsRefused(t *testing.T) {
	store := ingest.NewStore(ingest.StoreOptions{StaleGracePeriod: time.Hour})
	srv := ingest.NewServer(store, ingest.ClaimedIdentity(), ingest.ServerOptions{Hosted: func(m string) bool { return m != "gone" }})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(protocol.MetadataProtocol, protocol.Version))
	err := ingest.NewOwnership(srv).Relay(pushCtx{ctx: ctx}, ingest.ClusterIdentity{Mesh: "gone", Cluster: "c1"}, "peer", ingest.Epoch{})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("relay of a deleted mesh's cluster: %v; want PermissionDenied naming the mesh", err)
	}
	if len(store.Status()) != 0 {
		t.Errorf("the refused relay left a record: %+v", store.Status())
	}
}

// TestStreamOfAMeshDeletedAfterItsAuthenticationIsRefused: a stream
// authenticated as of a mesh that is not served once its record exists
// (the mesh was deleted meanwhile) is refused and leaves nothing.
func TestStreamOfAMeshDeletedAfterItsAuthenticationIsRefused(t *testing.T) {
	f := newFixtureAuth(t, time.Hour, ingest.ClaimedIdentity(), func(o *ingest.ServerOptions) {
		o.Hosted = func(m string) bool { return m != "gone" }
	})
	s := f.dial(t, "gone", "c1")
	if err := s.ended(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("stream of a deleted mesh: %v; want PermissionDenied naming the mesh", err)
	}
	if _, ok := f.status("gone", "c1"); ok {
		t.Error("the refused stream left its cluster listed")
	}
	f.dial(t, "m", "c1").sync(decode(t, fullState)) // another mesh is served
}
