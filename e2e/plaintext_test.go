package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// pushSynced opens a Sync.Push stream claiming (mesh, cluster), sends the
// synced marker of an empty state and returns once the hub has answered it.
// The stream stays open until the test ends.
func pushSynced(t *testing.T, conn *grpc.ClientConn, mesh, cluster string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, protocol.MetadataMesh, mesh, protocol.MetadataCluster, cluster)
	stream, err := protocolv1.NewSyncClient(conn).Push(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1"}); err != nil {
		_, err = stream.Recv()
		return err
	}
	r, err := stream.Recv()
	if err != nil {
		return err
	}
	if r.GetErrorDetail() != nil {
		return fmt.Errorf("the hub refused the synced marker: %s", r.GetErrorDetail().GetMessage())
	}
	return nil
}

// TestPlaintextHubServesOnlyItsMeshes runs the hub in plaintext mode, where
// spokes and proxies name their own mesh: a claim of a mesh ca.meshes lists
// is served, a claim of any other is refused, and the start-up warning
// names what the hub trusts.
func TestPlaintextHubServesOnlyItsMeshes(t *testing.T) {
	h := newHub(t, "--ca.meshes", "default=cluster.local,acme=acme.example")
	dial := func(port int) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr(port), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	spokes, xds := dial(h.spokes), dial(h.xds)

	for _, mesh := range []string{"default", "acme"} {
		if err := pushSynced(t, spokes, mesh, "c1"); err != nil {
			t.Errorf("a spoke of the hosted mesh %s: %v", mesh, err)
		}
	}
	_, err := pushClaiming(t, spokes, "rogue", "c1")
	wantCode(t, "a spoke claiming the mesh rogue", err, codes.PermissionDenied, `mesh "rogue"`)
	if _, ok := h.spokesView(t)["rogue/c1"]; ok {
		t.Error("the hub filed a spoke under the mesh rogue, which it does not host")
	}

	for _, meta := range []map[string]string{nil, {"MESH": "acme"}} {
		if _, err := adsFirst(t, xds, grpcNode("p1", meta)); err != nil {
			t.Errorf("a proxy with metadata %v: %v", meta, err)
		}
	}
	_, err = adsFirst(t, xds, grpcNode("p2", map[string]string{"MESH": "rogue"}))
	wantCode(t, "a proxy naming the mesh rogue", err, codes.PermissionDenied, `mesh "rogue"`)

	var warning string
	for _, l := range strings.Split(h.proc.Log(), "\n") {
		if strings.Contains(l, "INSECURE") {
			warning = l
		}
	}
	// The meshes served, by name.
	if !strings.Contains(warning, "meshes=acme,default") {
		t.Errorf("the plaintext warning %q does not name the meshes the hub serves", warning)
	}
}
