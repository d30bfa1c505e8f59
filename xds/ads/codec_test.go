package ads

import (
	"fmt"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/resource"
)

// Codec writes a response from its resources' prepared encodings, the
// bytes shared (not copied), and what it writes decodes as the response
// gRPC's own codec writes; a response without them, and other messages,
// are encoded as gRPC's codec does.
func TestCodecWritesPreparedEncodings(t *testing.T) {
	var prepared []*resource.Prepared
	var anys []*anypb.Any
	for _, name := range []string{"a", "b"} {
		p := resource.Prepare(typeurl.Cluster, gen.Resource{Name: name, Message: &clusterv3.Cluster{Name: name}})
		prepared, anys = append(prepared, p), append(anys, p.Any)
	}
	resp := &sotwResponse{&discoveryv3.DiscoveryResponse{VersionInfo: "v", TypeUrl: typeurl.Cluster, Nonce: "3", Resources: anys}, prepared}
	base := encoding.GetCodecV2(grpcproto.Name)
	for name, r := range map[string]*sotwResponse{
		"prepared": resp,
		"plain":    {DiscoveryResponse: resp.DiscoveryResponse},
	} {
		ours, err := Codec().Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := base.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var a, b discoveryv3.DiscoveryResponse
		if err := proto.Unmarshal(ours.Materialize(), &a); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(theirs.Materialize(), &b); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&a, &b) || !proto.Equal(&a, resp.DiscoveryResponse) {
			t.Errorf("%s: Codec wrote %v, gRPC's codec %v", name, &a, &b)
		}
		if name == "prepared" {
			if len(ours) != 3 || &ours[1].ReadOnlyData()[0] != &prepared[0].Wire()[0] {
				t.Errorf("%s: %d buffers, or the first resource's was copied", name, len(ours))
			}
		}
	}
	delta := &deltaResponse{&discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "v", TypeUrl: typeurl.Cluster, Nonce: "4",
		RemovedResources: []string{"c"}, Resources: []*discoveryv3.Resource{
			{Name: "a", Version: prepared[0].Hash, Resource: prepared[0].Any}, {Name: "b", Version: prepared[1].Hash, Resource: prepared[1].Any}}}, prepared}
	ours, err := Codec().Marshal(delta)
	if err != nil {
		t.Fatal(err)
	}
	var gotDelta discoveryv3.DeltaDiscoveryResponse
	if err := proto.Unmarshal(ours.Materialize(), &gotDelta); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&gotDelta, delta.DeltaDiscoveryResponse) || len(ours) != 3 {
		t.Errorf("delta: Codec wrote %v in %d buffers, want %v", &gotDelta, len(ours), delta.DeltaDiscoveryResponse)
	}

	// encodedSize is what Codec writes, read from the prepared encodings.
	unprepared := &sotwResponse{resp.DiscoveryResponse, []*resource.Prepared{{Name: "a", Any: anys[0]}, {Name: "b", Any: anys[1]}}}
	for name, r := range map[string]proto.Message{"prepared": resp, "plain": &sotwResponse{DiscoveryResponse: resp.DiscoveryResponse},
		"unprepared": unprepared, "delta": delta} {
		buf, err := Codec().Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := encodedSize(r), buf.Len(); got != want || got != proto.Size(r) {
			t.Errorf("%s: encodedSize %d, Codec wrote %d bytes, proto.Size %d", name, got, want, proto.Size(r))
		}
	}

	// Requests (and anything else) go through gRPC's codec.
	req := &discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Cluster, ResourceNames: []string{"a"}}
	buf, err := Codec().Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var got discoveryv3.DiscoveryRequest
	if err := Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(buf.Materialize())}, &got); err != nil || !proto.Equal(&got, req) {
		t.Errorf("request round trip: %v, %v", &got, err)
	}
}

// A request that arrives in several pieces (HTTP/2 frames) is gathered
// into a reused buffer that is not cleared: it decodes as gRPC's codec
// decodes it however dirty the buffer was, whatever its size.
func TestCodecDecodesPiecedRequestsIntoDirtyBuffers(t *testing.T) {
	for _, n := range []int{1, 40, 1000, 70000} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("outbound|80||svc-%d.demo.svc.cluster.local", i)
		}
		req := &discoveryv3.DiscoveryRequest{VersionInfo: "v1", TypeUrl: typeurl.Endpoint, ResourceNames: names, ResponseNonce: "7"}
		wire, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second time into a reused buffer
			// Leave a dirty buffer of the size the request needs in the pool.
			dirty := requestBuffers.Get(len(wire))
			for i := range *dirty {
				(*dirty)[i] = 0xff
			}
			requestBuffers.Put(dirty)
			pieces := frames(wire)
			var got discoveryv3.DiscoveryRequest
			if err := Codec().Unmarshal(pieces, &got); err != nil || !proto.Equal(&got, req) {
				t.Fatalf("%d names in %d pieces: decoded %d names, %v", n, len(pieces), len(got.GetResourceNames()), err)
			}
		}
		if b := requestBuffers.Get(len(wire)); len(*b) != len(wire) {
			t.Errorf("Get(%d) gave %d bytes", len(wire), len(*b))
		}
	}
}

// frames is b as gRPC hands a message to the codec when it came in HTTP/2
// frames of 16 KB: one buffer per frame.
func frames(b []byte) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return out
}

// BenchmarkSendSize: the size a send takes from the budget, of a
// state-of-the-world response of 1,000 prepared clusters (a sidecar's CDS
// on the load benchmark's workload), and the same with delta entries.
func BenchmarkSendSize(b *testing.B) {
	var prepared []*resource.Prepared
	var anys []*anypb.Any
	var entries []*discoveryv3.Resource
	for i := range 1000 {
		name := fmt.Sprintf("outbound|80||svc-%d.demo.svc.cluster.local", i)
		p := resource.Prepare(typeurl.Cluster, gen.Resource{Name: name, Message: &clusterv3.Cluster{Name: name,
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: name}}})
		prepared, anys = append(prepared, p), append(anys, p.Any)
		entries = append(entries, &discoveryv3.Resource{Name: name, Version: p.Hash, Resource: p.Any})
	}
	for name, r := range map[string]proto.Message{
		"sotw":  &sotwResponse{&discoveryv3.DiscoveryResponse{VersionInfo: "v", TypeUrl: typeurl.Cluster, Nonce: "3", Resources: anys}, prepared},
		"delta": &deltaResponse{&discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "v", TypeUrl: typeurl.Cluster, Nonce: "3", Resources: entries}, prepared},
	} {
		b.Run(name+"/proto.Size", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				proto.Size(r)
			}
		})
		b.Run(name+"/encodedSize", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				encodedSize(r)
			}
		})
	}
}
