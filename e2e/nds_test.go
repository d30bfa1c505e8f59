package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/internal/testwait"
	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
	"github.com/navemesh/nave/shared/typeurl"
)

// TestNameTableAgreesAcrossReplicas: two hub replicas, a spoke on each
// with ServiceEntries without addresses. A DNS-capturing sidecar's agent,
// over mTLS with a workload certificate, asks each replica for its name
// table (its own stream, the Envoy's node): both give every host the same
// auto-allocated address, and the Envoy's routes on either replica name
// that address.
func TestNameTableAgreesAcrossReplicas(t *testing.T) {
	rs := newReplicaSet(t, 2)
	h0, h1 := rs.hubs[0], rs.hubs[1]
	h0.waitMembers(t, "hub-0,hub-1")
	h1.waitMembers(t, "hub-1,hub-0")
	var c1, c2 []string
	var hosts []string
	for i := range 20 {
		host := fmt.Sprintf("ext-%d.demo.example", i)
		hosts = append(hosts, host)
		if i%2 == 0 {
			c1 = append(c1, serviceEntry(fmt.Sprintf("ext-%d", i), host, 17100+i))
		} else {
			c2 = append(c2, serviceEntry(fmt.Sprintf("ext-%d", i), host, 17100+i))
		}
	}
	startEnrolledSpoke(t, h0, "spoke-c1", "", "c1", strings.Join(c1, "---\n"), h0.token(t, "default", "c1", "1h"), t.TempDir())
	startEnrolledSpoke(t, h1, "spoke-c2", "", "c2", strings.Join(c2, "---\n"), h0.token(t, "default", "c2", "1h"), t.TempDir())

	roots := h0.servingRoots(t)
	cert := h0.workloadCert(t, "default", "cluster.local", "demo", "client")
	var dials []func() *grpc.ClientConn
	for _, h := range rs.hubs {
		dials = append(dials, func() *grpc.ClientConn { return dialTLS(t, addr(h.xds), roots, &cert) })
	}
	for i, w := range startWatchers(t, dials...) {
		testwait.For(t, 60*time.Second, func() error {
			if err := w.holds(hosts...); err != nil {
				return fmt.Errorf("client of hub-%d: %v", i, err)
			}
			return nil
		})
	}

	md, err := structpb.NewStruct(map[string]any{"MESH": "default", "NAMESPACE": "demo", "CLUSTER_ID": "c1", "DNS_CAPTURE": "true"})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "sidecar~10.9.0.1~client-1.demo~demo.svc.cluster.local", Metadata: md}
	var tables []map[string]string
	for i, dial := range dials {
		agent := adsOn(t, dial(), node)
		got := map[string]string{}
		for _, m := range agent.fetch(t, typeurl.NameTable) {
			for host, info := range m.(*ndsv1.NameTable).GetTable() {
				got[host] = strings.Join(info.GetIps(), ",")
			}
		}
		for _, host := range hosts {
			if !strings.HasPrefix(got[host], "240.240.") {
				t.Errorf("hub-%d: %s resolves to %q, want an address of 240.240.0.0/16", i, host, got[host])
			}
		}
		tables = append(tables, got)

		envoy := adsOn(t, dial(), node)
		routes := envoy.fetch(t, typeurl.Route, "7070")
		domains := map[string]bool{}
		for _, vh := range routes["7070"].(*routev3.RouteConfiguration).GetVirtualHosts() {
			for _, d := range vh.GetDomains() {
				domains[d] = true
			}
		}
		if a := got[hosts[0]]; !domains[a] || !domains[a+":7070"] {
			t.Errorf("hub-%d: the sidecar's routes do not name %s's address %s: %v", i, hosts[0], a, slices.Sorted(maps.Keys(domains)))
		}
	}
	if !maps.Equal(tables[0], tables[1]) {
		t.Errorf("the replicas' name tables differ:\nhub-0 %v\nhub-1 %v", tables[0], tables[1])
	}
}
