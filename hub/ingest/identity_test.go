package ingest_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/protocol"
)

// TestHostedMeshesRefusesOtherMeshes checks that a claimed identity is
// accepted only in a mesh the hub hosts, and that a refusal names the mesh
// claimed and the meshes hosted.
func TestHostedMeshesRefusesOtherMeshes(t *testing.T) {
	auth := ingest.HostedMeshes([]string{"default", "acme"}, ingest.ClaimedIdentity())
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
	// A refusal of the authenticator it wraps stands.
	_, err = auth.Authenticate(context.Background())
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no metadata: %v; want Unauthenticated", err)
	}
}
