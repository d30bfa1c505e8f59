package resource

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/build"
)

// Prepare's value is the deterministic marshal of the resource, and its
// Wire is that Any as one entry of a DiscoveryResponse's resources: a
// response of a header and entries decodes as the response they make.
func TestPrepareWire(t *testing.T) {
	var ps []*Prepared
	for _, name := range []string{"a", strings.Repeat("long-name-", 40)} { // one- and two-byte lengths
		c := &clusterv3.Cluster{Name: name, AltStatName: strings.Repeat("x", 300)}
		p := Prepare(typeurl.Cluster, gen.Resource{Name: name, Message: c})
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if string(p.Any.Value) != string(want) || p.Any.TypeUrl != typeurl.Cluster {
			t.Fatalf("%s: Any differs from the resource's marshal", name)
		}
		ps = append(ps, p)
	}
	head, err := proto.Marshal(&discoveryv3.DiscoveryResponse{VersionInfo: "v1", TypeUrl: typeurl.Cluster, Nonce: "7"})
	if err != nil {
		t.Fatal(err)
	}
	msg := append(append(head, ps[0].Wire()...), ps[1].Wire()...)
	var got discoveryv3.DiscoveryResponse
	if err := proto.Unmarshal(msg, &got); err != nil {
		t.Fatal(err)
	}
	want := &discoveryv3.DiscoveryResponse{VersionInfo: "v1", TypeUrl: typeurl.Cluster, Nonce: "7",
		Resources: []*anypb.Any{ps[0].Any, ps[1].Any}}
	if !proto.Equal(&got, want) {
		t.Errorf("decoded %v, want %v", &got, want)
	}

	head, err = proto.Marshal(&discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "v1", TypeUrl: typeurl.Cluster, Nonce: "8", RemovedResources: []string{"gone"}})
	if err != nil {
		t.Fatal(err)
	}
	msg = append(append(head, ps[0].DeltaWire()...), ps[1].DeltaWire()...)
	var delta discoveryv3.DeltaDiscoveryResponse
	if err := proto.Unmarshal(msg, &delta); err != nil {
		t.Fatal(err)
	}
	wantDelta := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "v1", TypeUrl: typeurl.Cluster, Nonce: "8", RemovedResources: []string{"gone"},
		Resources: []*discoveryv3.Resource{{Name: ps[0].Name, Version: ps[0].Hash, Resource: ps[0].Any}, {Name: ps[1].Name, Version: ps[1].Hash, Resource: ps[1].Any}}}
	if !proto.Equal(&delta, wantDelta) {
		t.Errorf("decoded %v, want %v", &delta, wantDelta)
	}
	if sum := sha256.Sum256(ps[1].Any.Value); ps[1].Hash != hex.EncodeToString(sum[:8]) {
		t.Errorf("hash %q is not the value's", ps[1].Hash)
	}
}

// A resource its generator encoded (Resource.Wire) is prepared from those
// bytes: the same Prepared as from marshalling its message.
func TestPrepareFromWire(t *testing.T) {
	for _, n := range []int{1, 30} { // one- and two-byte lengths
		rc := &routev3.RouteConfiguration{Name: "80"}
		for i := range n {
			rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{Name: strconv.Itoa(i), Domains: []string{"*"}})
		}
		var enc build.Encoder
		wire, err := enc.Marshal(rc)
		if err != nil {
			t.Fatal(err)
		}
		got := Prepare(typeurl.Route, gen.Resource{Name: "80", Message: rc, Wire: wire})
		want := Prepare(typeurl.Route, gen.Resource{Name: "80", Message: rc})
		if !bytes.Equal(got.DeltaWire(), want.DeltaWire()) || got.Hash != want.Hash || !proto.Equal(got.Any, want.Any) {
			t.Errorf("%d virtual hosts: prepared from Wire differs from prepared from the message", n)
		}
	}
}
