package ads_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

func TestResourcesAreServedByName(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	p := f.connect(t, node("proxy-1", "m"))

	p.Subscribe(typeurl.Listener, echoListener)
	lds := p.Next(typeurl.Listener)
	if got := adstest.Names(t, lds); !slices.Equal(got, []string{echoListener}) || lds.GetVersionInfo() == "" || lds.GetNonce() == "" {
		t.Fatalf("LDS response: resources %v, version %q, nonce %q", got, lds.GetVersionInfo(), lds.GetNonce())
	}
	p.ACK(lds, echoListener)

	p.Subscribe(typeurl.Route, echoListener)
	rds := p.Next(typeurl.Route)
	if got, want := weights(t, rds), map[string]uint32{echoV1: 80, echoV2: 20}; !maps.Equal(got, want) {
		t.Errorf("route weights = %v, want %v", got, want)
	}
	p.ACK(rds, echoListener)

	// A subset of the clusters.
	p.Subscribe(typeurl.Cluster, echoV1)
	cds := p.Next(typeurl.Cluster)
	if got := adstest.Names(t, cds); !slices.Equal(got, []string{echoV1}) {
		t.Errorf("CDS for %s sent %v", echoV1, got)
	}
	p.ACK(cds, echoV1)

	p.Subscribe(typeurl.Endpoint, echoV1)
	eds := p.Next(typeurl.Endpoint)
	if got := adstest.Names(t, eds); !slices.Equal(got, []string{echoV1}) {
		t.Errorf("EDS for %s sent %v", echoV1, got)
	}
	if got := ports(t, eds); !maps.Equal(got, map[uint32]int{17071: 1}) {
		t.Errorf("endpoints of %s have ports %v, want one on 17071", echoV1, got)
	}
	p.ACK(eds, echoV1)
	p.Quiet(quietFor, "every type is ACKed and nothing changed")

	// The status records the ACKs as the stream handles them: awaited,
	// since the quiet period says nothing of when it did.
	testwait.For(t, waitFor, func() error {
		cs := f.connStatus(t, "proxy-1")
		if cs.Mesh != "m" {
			return fmt.Errorf("connection mesh = %q, want m", cs.Mesh)
		}
		for _, resp := range []*discoveryv3.DiscoveryResponse{lds, rds, cds, eds} {
			ts := cs.Types[shortName(resp.GetTypeUrl())]
			if ts.SentVersion != resp.GetVersionInfo() || ts.AckedVersion != resp.GetVersionInfo() || ts.Pending || ts.Subscribed != 1 {
				return fmt.Errorf("%s status = %+v, want version %s sent and ACKed", shortName(resp.GetTypeUrl()), ts, resp.GetVersionInfo())
			}
		}
		return nil
	})

	// Asking for a name that does not exist is answered with what exists.
	p.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Listener, ResourceNames: []string{echoListener, "missing.demo.svc.cluster.local:80"},
		VersionInfo: lds.GetVersionInfo(), ResponseNonce: lds.GetNonce()})
	lds2 := p.Next(typeurl.Listener)
	if got := adstest.Names(t, lds2); !slices.Equal(got, []string{echoListener}) {
		t.Errorf("LDS for a known and a missing name sent %v", got)
	}
}

func TestWildcardClusterRequestGetsEveryCluster(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	p := f.connect(t, node("proxy-1", "m"))

	p.Subscribe(typeurl.Cluster)
	cds := p.Next(typeurl.Cluster)
	if got, want := adstest.Names(t, cds), []string{echoV1, echoV2, echoCluster}; !slices.Equal(got, want) {
		t.Errorf("wildcard CDS sent %v, want %v", got, want)
	}
	p.ACK(cds)
	p.Subscribe(typeurl.Endpoint)
	eds := p.Next(typeurl.Endpoint)
	if got := ports(t, eds); !maps.Equal(got, map[uint32]int{17071: 2, 17072: 2}) {
		t.Errorf("wildcard EDS endpoint ports = %v, want both endpoints in the whole cluster and in their subsets", got)
	}
	p.ACK(eds)
	p.Quiet(quietFor, "a wildcard ACK changes nothing")
	if ts := f.connStatus(t, "proxy-1").Types["Cluster"]; !ts.Wildcard || ts.SentResources != 3 {
		t.Errorf("CDS status = %+v, want a wildcard subscription with 3 clusters sent", ts)
	}
}

func TestUnknownTypeIsIgnored(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	p := f.connect(t, node("proxy-1", "m"))
	p.Subscribe("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret", "default")
	p.Subscribe(typeurl.Listener, echoListener)
	p.Next(typeurl.Listener)
}

func TestFirstRequestMustNameTheNode(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	cases := []struct {
		name string
		node *corev3.Node
		want string
	}{
		{"no node", nil, "node"},
		{"no id", &corev3.Node{Cluster: "c"}, "node.id"},
		{"empty mesh", &corev3.Node{Id: "proxy-1", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			ads.MetadataMesh: structpb.NewStringValue("")}}}, ads.MetadataMesh},
		{"mesh not a string", &corev3.Node{Id: "proxy-1", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			ads.MetadataMesh: structpb.NewNumberValue(1)}}}, ads.MetadataMesh},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := f.connect(t, tc.node)
			p.Subscribe(typeurl.Listener, echoListener)
			err := p.Ended()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("stream ended with %v, want InvalidArgument naming %s", err, tc.want)
			}
		})
	}
	if st := f.ads.Status(); len(st) != 0 {
		t.Errorf("refused streams are listed: %+v", st)
	}
}
