package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/envoy"
)

// TestMeshesAtRuntimeOnThreeReplicas drives the meshes with navectl mesh
// (docs/meshes.md), on the admin listener of a replica (no operator
// listener: the API is served there).

// createMesh creates mesh name with trust domain td on the hub of h (its
// admin listener: the replicas run without an operator listener).
func createMesh(t *testing.T, h *hub, name, td string) {
	t.Helper()
	spec := filepath.Join(t.TempDir(), name+".yaml")
	writeFile(t, spec, fmt.Sprintf("apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: %s}\nspec: {trustDomain: %s}\n", name, td))
	mustNavectl(t, "mesh", "create", "-f", spec, "--hub-admin="+h.url(""))
}

// updateMesh replaces the spec of mesh name (trust domain td) with one
// whose meshConfig is meshConfig (a YAML flow mapping).
func updateMesh(t *testing.T, h *hub, name, td, meshConfig string) {
	t.Helper()
	spec := filepath.Join(t.TempDir(), name+".yaml")
	writeFile(t, spec, fmt.Sprintf("apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: %s}\nspec: {trustDomain: %s, meshConfig: %s}\n", name, td, meshConfig))
	mustNavectl(t, "mesh", "update", "-f", spec, "--hub-admin="+h.url(""))
}

// sidecarLDS opens the ADS stream of an Envoy sidecar (demo/web) at the
// xDS listener of h presenting cert, and returns it with its first
// listeners.
func sidecarLDS(t *testing.T, h *hub, cert tls.Certificate, pod string) (*adsClient, map[string]proto.Message) {
	t.Helper()
	p := adsOn(t, dialTLS(t, addr(h.xds), h.servingRoots(t), &cert), grpcNode("sidecar~127.0.0.1~"+pod+".demo~demo.svc.cluster.local", nil))
	return p, p.fetch(t, typeurl.Listener)
}

// fallthroughChain names the filter chain the virtual outbound listener
// of lds sends unknown destinations to: PassthroughFilterChain under
// ALLOW_ANY, BlackHoleFilterChain under REGISTRY_ONLY.
func fallthroughChain(t *testing.T, lds map[string]proto.Message) string {
	t.Helper()
	l, ok := lds[envoy.VirtualOutboundListener].(*listenerv3.Listener)
	if !ok {
		t.Fatalf("no %s listener among %d", envoy.VirtualOutboundListener, len(lds))
	}
	return l.GetDefaultFilterChain().GetName()
}

// acceptedPeers lists the identity prefixes the virtual inbound listener
// of lds accepts mTLS peers of on ports no service declares
// (PERMISSIVE): the mesh's trust domain's, then its aliases'.
func acceptedPeers(t *testing.T, lds map[string]proto.Message) []string {
	t.Helper()
	l, ok := lds[envoy.VirtualInboundListener].(*listenerv3.Listener)
	if !ok {
		t.Fatalf("no %s listener among %d", envoy.VirtualInboundListener, len(lds))
	}
	for _, c := range l.GetFilterChains() {
		if c.GetName() != "InboundPassthroughFilterChainMTLS" {
			continue
		}
		var tlsCtx tlsv3.DownstreamTlsContext
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&tlsCtx); err != nil {
			t.Fatalf("%s: %v", c.GetName(), err)
		}
		var out []string
		v := tlsCtx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
		for _, m := range v.GetMatchTypedSubjectAltNames() {
			out = append(out, m.GetMatcher().GetPrefix())
		}
		return out
	}
	t.Fatalf("%s has no InboundPassthroughFilterChainMTLS", envoy.VirtualInboundListener)
	return nil
}

// localityWeighted reports whether the cluster named name among cds
// weighs its endpoints' localities (a localityLbSetting distribute
// applies to it).
func localityWeighted(t *testing.T, cds map[string]proto.Message, name string) bool {
	t.Helper()
	c, ok := cds[name].(*clusterv3.Cluster)
	if !ok {
		t.Fatalf("no cluster %s among %d", name, len(cds))
	}
	return c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil
}

// deleteMesh deletes mesh name, spokes connected or not.
func deleteMesh(t *testing.T, h *hub, name string) {
	t.Helper()
	mustNavectl(t, "mesh", "delete", name, "--force", "--hub-admin="+h.url(""))
}

// enrollOn trades token for a cluster certificate at the spokes listener
// of h, as a spoke's first contact does.
func enrollOn(t *testing.T, h *hub, token string) (*protocolv1.EnrollResponse, error) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "spoke"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := dialTLS(t, addr(h.spokes), h.servingRoots(t), nil)
	defer conn.Close()
	return protocolv1.NewEnrollmentClient(conn).Enroll(ctx,
		&protocolv1.EnrollRequest{Token: token, CsrPem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})})
}

// waitEnrollable waits until every replica of rs accepts an enrollment
// into mesh (each probe spends a token of a cluster of its own), and logs
// how long after created each did.
func waitEnrollable(t *testing.T, rs *replicaSet, mesh string, created time.Time) {
	t.Helper()
	for i, h := range rs.hubs {
		n := 0
		testwait.For(t, 30*time.Second, func() error {
			n++
			_, err := enrollOn(t, h, rs.hubs[0].token(t, mesh, fmt.Sprintf("probe-%d-%d", i, n), "1h"))
			return err
		})
		t.Logf("hub-%d accepts an enrollment into mesh %s %s after navectl mesh create", i, mesh, time.Since(created).Round(time.Millisecond))
	}
}

// waitMeshGone waits until no replica of rs lists mesh (/debug/meshes):
// it was purged and its record removed.
func waitMeshGone(t *testing.T, rs *replicaSet, mesh string) {
	t.Helper()
	for i, h := range rs.hubs {
		testwait.For(t, 60*time.Second, func() error {
			var meshes []struct {
				Mesh  string `json:"mesh"`
				Phase string `json:"phase"`
			}
			if err := harness.GetJSON(h.url("/debug/meshes"), &meshes); err != nil {
				return err
			}
			for _, m := range meshes {
				if m.Mesh == mesh {
					return fmt.Errorf("hub-%d still lists mesh %s (%s)", i, mesh, m.Phase)
				}
			}
			return nil
		})
	}
}

// cdsStream is a proxy's SotW ADS stream of clusters: the cluster names of
// its first response, and how the stream ended.
type cdsStream struct {
	first chan []string
	done  chan struct{}
	err   error
}

// openCDS opens a CDS stream at the xDS listener of h presenting cert.
func openCDS(t *testing.T, h *hub, cert tls.Certificate) *cdsStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	conn := dialTLS(t, addr(h.xds), h.servingRoots(t), &cert)
	t.Cleanup(func() { conn.Close() })
	s := &cdsStream{first: make(chan []string, 1), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			s.err = err
			return
		}
		if s.err = stream.Send(&discoveryv3.DiscoveryRequest{Node: grpcNode("web-1", nil), TypeUrl: typeurl.Cluster}); s.err != nil {
			return
		}
		for first := true; ; first = false {
			r, err := stream.Recv()
			if err != nil {
				s.err = err
				return
			}
			if first {
				var names []string
				for _, res := range r.GetResources() {
					var c clusterv3.Cluster
					if err := res.UnmarshalTo(&c); err == nil {
						names = append(names, c.GetName())
					}
				}
				s.first <- names
			}
			if s.err = stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Cluster, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); s.err != nil {
				if errors.Is(s.err, io.EOF) {
					// The server ended the stream while this ACK went
					// out (a push it made as it cut the stream off):
					// its status is what Recv returns.
					_, s.err = stream.Recv()
				}
				return
			}
		}
	}()
	return s
}

// ended waits for the stream to end and returns its error.
func (s *cdsStream) ended(t *testing.T) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(30 * time.Second):
		t.Fatal("the proxy's stream did not end")
		return nil
	}
}

// TestMeshesAtRuntimeOnThreeReplicas: a mesh created on a running set of
// three replicas gets its CA and is enrollable on every replica (the time
// from navectl mesh create to an enrollment every replica accepts is
// logged); a spoke enrolls into it, and its proxies on every replica see
// its services and not another mesh's. Its MeshConfig changed on one
// replica (outboundTrafficPolicy REGISTRY_ONLY, a trust domain alias, a
// locality default) reaches its sidecar on another, and no sidecar of mesh
// default. Deleted,
// its spoke and proxies are cut off on every replica, and its tokens and
// certificates are refused.
// Re-created with the name, it inherits nothing: a new root, the old
// spoke's certificate and the old tokens refused.
func TestMeshesAtRuntimeOnThreeReplicas(t *testing.T) {
	const hostA, hostD = "svc-a.demo.svc.cluster.local", "svc-d.demo.svc.cluster.local"
	rs := newReplicaSet(t, 3)
	for _, h := range rs.hubs {
		h.waitMembers(t, map[*hub]string{rs.hubs[0]: "hub-0,hub-1,hub-2", rs.hubs[1]: "hub-1,hub-0,hub-2", rs.hubs[2]: "hub-2,hub-0,hub-1"}[h])
	}
	h0 := rs.hubs[0]
	startEnrolledSpoke(t, h0, "spoke-default", "", "d1", serviceEntry("svc-d", hostD, 17091), h0.token(t, "default", "d1", "1h"), t.TempDir())

	// Created on hub-0: every replica enrolls into it within seconds.
	created := time.Now()
	createMesh(t, h0, "acme", "acme.example")
	waitEnrollable(t, rs, "acme", created)
	rootPath := filepath.Join(h0.state, "ca", "acme", "root-cert.pem")
	firstRoot, err := os.ReadFile(rootPath)
	if err != nil {
		t.Fatalf("the new mesh's CA: %v", err)
	}

	// A spoke enrolls; proxies of acme on every replica see acme only.
	startEnrolledSpoke(t, h0, "spoke-acme", "acme", "east", serviceEntry("svc-a", hostA, 17092), h0.token(t, "acme", "east", "1h"), t.TempDir())
	cert := h0.workloadCert(t, "acme", "acme.example", "demo", "web")
	var proxies []*cdsStream
	for i, h := range rs.hubs {
		testwait.For(t, 30*time.Second, func() error {
			if c := h.spokesView(t)["acme/east"]; !c.Synced {
				return fmt.Errorf("hub-%d does not hold acme/east synced", i)
			}
			return nil
		})
		p := openCDS(t, h, cert)
		select {
		case names := <-p.first:
			got := strings.Join(names, " ")
			if !strings.Contains(got, hostA) || strings.Contains(got, hostD) {
				t.Errorf("hub-%d: the acme proxy's clusters hold %q; want %s and not %s", i, got, hostA, hostD)
			}
		case <-p.done:
			t.Fatalf("hub-%d: the acme proxy's stream ended: %v", i, p.err)
		case <-time.After(30 * time.Second):
			t.Fatalf("hub-%d: the acme proxy got no clusters", i)
		}
		proxies = append(proxies, p)
	}
	pending := h0.token(t, "acme", "west", "1h")

	// Its MeshConfig changed on hub-0 (outboundTrafficPolicy REGISTRY_ONLY,
	// a trust domain alias, a locality default): an acme sidecar on hub-1
	// is sent listeners that drop unknown destinations and accept peers of
	// the alias, and clusters weighing localities; a default sidecar on
	// hub-1 is sent nothing.
	h1 := rs.hubs[1]
	acmeCert := h0.workloadCert(t, "acme", "acme.example", "demo", "web")
	acmeSidecar, lds := sidecarLDS(t, h1, acmeCert, "web-1")
	acmeClusters := adsOn(t, dialTLS(t, addr(h1.xds), h1.servingRoots(t), &acmeCert), grpcNode("sidecar~127.0.0.1~web-3.demo~demo.svc.cluster.local", nil))
	clusterA := build.ClusterName(hostA, 7070, "")
	if localityWeighted(t, acmeClusters.fetch(t, typeurl.Cluster), clusterA) {
		t.Errorf("hub-1: the acme sidecar's %s weighs localities before the change", clusterA)
	}
	if got := fallthroughChain(t, lds); got != "PassthroughFilterChain" {
		t.Errorf("hub-1: the acme sidecar's unknown destinations go to %s before the change; want PassthroughFilterChain (ALLOW_ANY)", got)
	}
	if got := acceptedPeers(t, lds); !slices.Equal(got, []string{"spiffe://acme.example/"}) {
		t.Errorf("hub-1: the acme sidecar accepts peers of %q before the change; want its trust domain's only", got)
	}
	defaultSidecar, lds := sidecarLDS(t, h1, h0.workloadCert(t, "default", "cluster.local", "demo", "web"), "web-2")
	if got := fallthroughChain(t, lds); got != "PassthroughFilterChain" {
		t.Errorf("hub-1: the default sidecar's unknown destinations go to %s; want PassthroughFilterChain (ALLOW_ANY)", got)
	}
	changed := time.Now()
	updateMesh(t, h0, "acme", "acme.example", `{outboundTrafficPolicy: {mode: REGISTRY_ONLY}, trustDomainAliases: [acme-old.example], `+
		`localityLbSetting: {distribute: [{from: "*", to: {"*": 100}}]}}`)
	lds = acmeSidecar.next(t, typeurl.Listener, 30*time.Second)
	t.Logf("hub-1 pushed mesh acme's MeshConfig change %s after navectl mesh update", time.Since(changed).Round(time.Millisecond))
	if got := fallthroughChain(t, lds); got != "BlackHoleFilterChain" {
		t.Errorf("hub-1: after the MeshConfig change the acme sidecar's unknown destinations go to %s; want BlackHoleFilterChain (REGISTRY_ONLY)", got)
	}
	if got := acceptedPeers(t, lds); !slices.Equal(got, []string{"spiffe://acme.example/", "spiffe://acme-old.example/"}) {
		t.Errorf("hub-1: after the MeshConfig change the acme sidecar accepts peers of %q; want its trust domain's and its alias's", got)
	}
	if !localityWeighted(t, acmeClusters.next(t, typeurl.Cluster, 30*time.Second), clusterA) {
		t.Errorf("hub-1: after the MeshConfig change the acme sidecar's %s does not weigh localities (localityLbSetting distribute)", clusterA)
	}
	defaultSidecar.quiet(t, 3*time.Second, "mesh acme's MeshConfig changed")

	// Deleted: cut off on every replica.
	deleteMesh(t, h0, "acme")
	for i, p := range proxies {
		if err := p.ended(t); status.Code(err) != codes.PermissionDenied && status.Code(err) != codes.Unauthenticated {
			t.Errorf("hub-%d: the deleted mesh's proxy stream ended with %v; want it cut off", i, err)
		}
	}
	for i, h := range rs.hubs {
		testwait.For(t, 30*time.Second, func() error {
			if c, ok := h.spokesView(t)["acme/east"]; ok {
				return fmt.Errorf("hub-%d still holds the deleted mesh's cluster: %+v", i, c)
			}
			return nil
		})
		if _, err := enrollOn(t, h, pending); err == nil {
			t.Errorf("hub-%d enrolled with the deleted mesh's token", i)
		}
		p := openCDS(t, h, cert)
		if err := p.ended(t); status.Code(err) != codes.Unauthenticated {
			t.Errorf("hub-%d: a proxy with the deleted mesh's certificate: %v; want Unauthenticated", i, err)
		}
	}

	waitMeshGone(t, rs, "acme")

	// Re-created: inherits nothing. The old spoke (still running, with its
	// certificate) stays out; a new spoke enrolls with a new token.
	created = time.Now()
	createMesh(t, h0, "acme", "acme.example")
	waitEnrollable(t, rs, "acme", created)
	startEnrolledSpoke(t, h0, "spoke-acme-west", "acme", "west", serviceEntry("svc-w", "svc-w.demo.svc.cluster.local", 17093),
		h0.token(t, "acme", "west", "1h"), t.TempDir())
	for i, h := range rs.hubs {
		testwait.For(t, 30*time.Second, func() error {
			if c := h.spokesView(t)["acme/west"]; !c.Synced {
				return fmt.Errorf("hub-%d does not hold the re-created mesh's new cluster", i)
			}
			return nil
		})
		// acme/west is in; acme/east, which retried meanwhile, is not.
		if c, ok := h.spokesView(t)["acme/east"]; ok {
			t.Errorf("hub-%d holds the deleted incarnation's cluster: %+v", i, c)
		}
		if _, err := enrollOn(t, h, pending); err == nil {
			t.Errorf("hub-%d enrolled with the deleted incarnation's token", i)
		}
	}
	if again, err := os.ReadFile(rootPath); err != nil || bytes.Equal(again, firstRoot) {
		t.Errorf("the re-created mesh's root: %v; want a new one", err)
	}
}
