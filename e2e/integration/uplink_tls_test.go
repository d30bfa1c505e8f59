package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/spoke/uplink"
)

// TestUplinkOverMTLSIsTheCertificatesCluster pushes over mTLS with an
// enrolled certificate while the metadata claims another (mesh, cluster):
// the hub files the objects under the certificate's identity.
func TestUplinkOverMTLSIsTheCertificatesCluster(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	tok, _, err := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := enroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCAHash: enroll.CAHash(h.Serving.Cert), StateDir: filepath.Join(t.TempDir(), "state")}
	if _, err := enroll.Enroll(ctx, opts, tok); err != nil {
		t.Fatal(err)
	}
	r, err := enroll.NewRenewer(enroll.RenewerOptions{Address: h.Addr, ServerName: enrolltest.ServerName, StateDir: opts.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	up := uplink.New(uplink.Options{Address: h.Addr, Mesh: enrolltest.MeshB, Cluster: "spoofed", TLS: r.ClientTLS(),
		BackoffInitial: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond, MaxMessageBytes: 1 << 20})
	up.Update(serviceEntries(t, 3))
	done := make(chan error, 1)
	go func() { done <- up.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	testwait.For(t, waitFor, func() error {
		if err := up.Synced(); err != nil {
			return err
		}
		st := h.Ingest.Status()
		if len(st) != 1 || st[0].ClusterIdentity != (ingest.ClusterIdentity{Mesh: enrolltest.MeshA, Cluster: "east"}) {
			return fmt.Errorf("hub sees %+v, want acme/east only", st)
		}
		n := 0
		for _, c := range h.Ingest.Clusters(enrolltest.MeshA) {
			n += len(c.Objects)
		}
		if n != 3 {
			return fmt.Errorf("hub holds %d objects of mesh acme, want 3", n)
		}
		return nil
	})
	if len(h.Ingest.Clusters(enrolltest.MeshB)) != 0 {
		t.Error("the hub filed objects under the claimed mesh")
	}
	if !up.Status().TLS {
		t.Error("status does not say the uplink uses TLS")
	}
}
