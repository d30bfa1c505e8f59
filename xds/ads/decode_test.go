package ads

import (
	"fmt"
	"runtime"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
)

func ackWithNames(n int) *discoveryv3.DiscoveryRequest {
	req := &discoveryv3.DiscoveryRequest{VersionInfo: "v7", TypeUrl: typeurl.Endpoint, ResponseNonce: "42"}
	for i := range n {
		req.ResourceNames = append(req.ResourceNames, fmt.Sprintf("outbound|80||svc-%d.ns-%d.svc.cluster.local", i, i%10))
	}
	return req
}

// decodeBoth decodes b as proto.Unmarshal does and through unmarshalRequest
// with sets, and fails unless they agree (result or error).
func decodeBoth(t *testing.T, b []byte, sets *nameSets) *discoveryv3.DiscoveryRequest {
	t.Helper()
	want, got := &discoveryv3.DiscoveryRequest{}, &discoveryv3.DiscoveryRequest{}
	werr, gerr := proto.Unmarshal(b, want), unmarshalRequest(b, got, sets)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("errors differ: proto.Unmarshal %v, unmarshalRequest %v", werr, gerr)
	}
	if werr == nil && !proto.Equal(want, got) {
		t.Fatalf("decoded differently:\nproto.Unmarshal %v\nunmarshalRequest %v", want, got)
	}
	return got
}

func TestUnmarshalRequestTakesAHeldSubscription(t *testing.T) {
	sets := newNameSets()
	req := ackWithNames(1000)
	req.Node = &corev3.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// No stream holds these names yet: decoded as usual.
	first := decodeBoth(t, b, sets)
	held := sets.get(first.GetResourceNames()) // a stream subscribes
	// Another stream subscribing to the same names shares the set and
	// encodes nothing for it.
	if a := testing.AllocsPerRun(10, func() { sets.get(first.GetResourceNames()) }); a > 0 {
		t.Errorf("looking up a held subscription allocated %v times", a)
	}
	// The next request listing them takes the held list.
	again := decodeBoth(t, b, sets)
	if &again.GetResourceNames()[0] != &held.list[0] {
		t.Errorf("the request's names were decoded again, not taken from the held subscription")
	}
	// Any other list, or the same names in another order, is decoded.
	other := ackWithNames(1000)
	other.ResourceNames[0], other.ResourceNames[1] = other.ResourceNames[1], other.ResourceNames[0]
	ob, _ := proto.Marshal(other)
	if got := decodeBoth(t, ob, sets); &got.GetResourceNames()[0] == &held.list[0] {
		t.Errorf("a reordered list took the held one")
	}
	// Names not in one run (a field between them) are decoded as they are.
	split := protowire.AppendTag(nil, resourceNamesField, protowire.BytesType)
	split = protowire.AppendString(split, held.list[0])
	split = protowire.AppendTag(split, 4, protowire.BytesType)
	split = protowire.AppendString(split, typeurl.Endpoint)
	for _, name := range held.list[1:] {
		split = protowire.AppendTag(split, resourceNamesField, protowire.BytesType)
		split = protowire.AppendString(split, name)
	}
	if got := decodeBoth(t, split, sets); &got.GetResourceNames()[0] == &held.list[0] {
		t.Errorf("names in two runs took the held list")
	}
	// A list of the same length differing only between the bytes its run
	// is keyed by (runKey samples) is told apart, and each takes its own.
	twin := ackWithNames(1000)
	twin.ResourceNames[50] = "outbound|80||svc-05.ns-0.svc.cluster.local"
	tb, _ := proto.Marshal(twin)
	heldTwin := sets.get(twin.GetResourceNames())
	if sets.runKey(heldTwin.wire) != sets.runKey(held.wire) {
		t.Fatal("the twin lists' runs have different keys: the case proves nothing")
	}
	if got := decodeBoth(t, tb, sets); &got.GetResourceNames()[0] != &heldTwin.list[0] {
		t.Errorf("the twin list did not take its own held list")
	}
	if got := decodeBoth(t, b, sets); &got.GetResourceNames()[0] != &held.list[0] {
		t.Errorf("the list did not take its own held list beside its twin")
	}
	runtime.KeepAlive(heldTwin)
	// Past runsPerKey lists under one key, a list is not registered: a
	// request listing it is decoded as usual (and still decoded right),
	// so no ACK is compared with more than runsPerKey runs.
	var alike []*nameSet
	var last []byte
	for i := range runsPerKey + 2 {
		l := ackWithNames(1000)
		l.ResourceNames[50] = fmt.Sprintf("outbound|80||svc-%02d.ns-0.svc.cluster.local", i+10)
		alike = append(alike, sets.get(l.GetResourceNames()))
		last, _ = proto.Marshal(l)
	}
	if got := len(sets.runs[sets.runKey(held.wire)]); got != runsPerKey {
		t.Errorf("%d subscriptions registered under one run key, want %d (the bound)", got, runsPerKey)
	}
	if got := decodeBoth(t, last, sets); &got.GetResourceNames()[0] == &alike[len(alike)-1].list[0] {
		t.Errorf("a list past the key's bound took its held list: it was compared with more than %d runs", runsPerKey)
	}
	runtime.KeepAlive(alike)
	// Garbage is refused as proto.Unmarshal refuses it.
	decodeBoth(t, append(b[:len(b):len(b)], 0xff), sets)
	runtime.KeepAlive(held) // held until here: the subscription is live
}

func FuzzUnmarshalRequest(f *testing.F) {
	for _, n := range []int{0, 1, 3} {
		b, _ := proto.Marshal(ackWithNames(n))
		f.Add(b)
	}
	f.Add([]byte{0x1a, 0x01, 0xff})                         // a name that is not UTF-8
	f.Add([]byte{0x1a, 0x00, 0x22, 0x00, 0x1a, 0x00})       // two runs
	f.Add([]byte{0x1d, 0x00, 0x00, 0x00, 0x00, 0x1a, 0x00}) // field 3 with another wire type
	f.Fuzz(func(t *testing.T, b []byte) {
		sets := newNameSets()
		var want discoveryv3.DiscoveryRequest
		if proto.Unmarshal(b, &want) == nil && len(want.GetResourceNames()) > 0 {
			s := sets.get(want.GetResourceNames())
			defer runtime.KeepAlive(s)
		}
		decodeBoth(t, b, sets)
	})
}

// BenchmarkDecodeACK decodes an Envoy sidecar's EDS ACK listing 1,000
// clusters that another stream already subscribes to.
func BenchmarkDecodeACK(b *testing.B) {
	req := ackWithNames(1000)
	enc, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	sets := newNameSets()
	held := sets.get(req.GetResourceNames())
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r discoveryv3.DiscoveryRequest
			if err := proto.Unmarshal(enc, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshalRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r discoveryv3.DiscoveryRequest
			if err := unmarshalRequest(enc, &r, sets); err != nil {
				b.Fatal(err)
			}
		}
	})
	// As the server decodes it: through the codec, arrived in HTTP/2
	// frames of 16 KB.
	pieces := frames(enc)
	held2 := sharedNames.get(req.GetResourceNames())
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r discoveryv3.DiscoveryRequest
			if err := Codec().Unmarshal(pieces, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	runtime.KeepAlive(held)
	runtime.KeepAlive(held2)
}

// TestDecodeACKBenchmarkOnce is BenchmarkDecodeACK's test twin.
func TestDecodeACKBenchmarkOnce(t *testing.T) {
	if r := testing.Benchmark(BenchmarkDecodeACK); r.N == 0 {
		t.Fatal("the benchmark did not run")
	}
}
