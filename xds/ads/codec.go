package ads

import (
	"math/bits"
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/xds/resource"
)

// Codec returns the gRPC codec for a server that serves this package's
// ADS (grpc.ForceServerCodecV2): it writes a state-of-the-world response
// as a small header followed by its resources' prepared encodings
// (resource.Prepared.Wire), which every stream sending them shares,
// instead of encoding the response into a buffer of its own per stream;
// a state-of-the-world request listing the names of a subscription some
// stream holds takes that subscription's list instead of decoding them
// (unmarshalRequest); every other message it encodes and decodes as
// gRPC's proto codec does.
// A server without it sends the same bytes, encoded per stream.
func Codec() encoding.CodecV2 { return codec{base: encoding.GetCodecV2(grpcproto.Name)} }

type codec struct{ base encoding.CodecV2 }

func (c codec) Name() string { return c.base.Name() }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if req, ok := v.(*discoveryv3.DiscoveryRequest); ok {
		buf := data.MaterializeToBuffer(requestBuffers)
		defer buf.Free()
		return unmarshalRequest(buf.ReadOnlyData(), req, sharedNames)
	}
	return c.base.Unmarshal(data, v)
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(preparedResponse); ok && r.entries() >= 0 {
		return write(r, c.base)
	}
	return c.base.Marshal(v)
}

// preparedResponse is a response Codec can write from its resources'
// prepared encodings: its head (the response without its resources),
// then each resource's entry. Fields may come in any order on the wire,
// and the resources are field 2 of both response types.
type preparedResponse interface {
	proto.Message
	head() proto.Message
	// entries is the number of resources, -1 when they are not all
	// prepared.
	entries() int
	// entry is the encoding of resource i as a response entry, nil when
	// its Prepared was not made by resource.Prepare.
	entry(i int) []byte
}

// write encodes r's head, then appends its prepared entries (shared, not
// copied); r through base if some resource has no prepared encoding.
func write(r preparedResponse, base encoding.CodecV2) (mem.BufferSlice, error) {
	n := r.entries()
	for i := range n {
		if r.entry(i) == nil {
			return base.Marshal(r)
		}
	}
	h, err := proto.Marshal(r.head())
	if err != nil {
		return nil, err
	}
	out := make(mem.BufferSlice, 0, 1+n)
	out = append(out, mem.SliceBuffer(h))
	for i := range n {
		out = append(out, mem.SliceBuffer(r.entry(i)))
	}
	return out, nil
}

// encodedSize is the number of bytes r encodes to: for a response with
// prepared encodings, the head's size plus its entries' lengths (what
// Codec writes, without walking the resources), else proto.Size.
func encodedSize(r proto.Message) int {
	if pr, ok := r.(preparedResponse); ok && pr.entries() >= 0 {
		size := 0
		for i := range pr.entries() {
			e := pr.entry(i)
			if e == nil {
				return proto.Size(r)
			}
			size += len(e)
		}
		return size + proto.Size(pr.head())
	}
	return proto.Size(r)
}

// preparedEntries is entries of a response of n resources and their
// Prepared.
func preparedEntries(prepared []*resource.Prepared, n int) int {
	if len(prepared) != n {
		return -1
	}
	return n
}

// deltaResponse is a DeltaDiscoveryResponse whose Resources are the
// Prepared (each as Name, Version Hash, Resource Any), in the same order,
// for Codec to write their shared encodings. Under another codec it is
// the DeltaDiscoveryResponse it embeds.
type deltaResponse struct {
	*discoveryv3.DeltaDiscoveryResponse
	prepared []*resource.Prepared
}

// sotwResponse is a DiscoveryResponse (Resources set) with the Prepared
// its resources are, in the same order, for Codec to write their shared
// encodings. Under another codec it is the DiscoveryResponse it embeds.
type sotwResponse struct {
	*discoveryv3.DiscoveryResponse
	prepared []*resource.Prepared
}

func (r *sotwResponse) head() proto.Message {
	return &discoveryv3.DiscoveryResponse{VersionInfo: r.VersionInfo, Canary: r.Canary, TypeUrl: r.TypeUrl, Nonce: r.Nonce, ControlPlane: r.ControlPlane}
}

func (r *sotwResponse) entries() int {
	return preparedEntries(r.prepared, len(r.Resources))
}

func (r *sotwResponse) entry(i int) []byte { return r.prepared[i].Wire() }

func (r *deltaResponse) head() proto.Message {
	return &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: r.SystemVersionInfo, TypeUrl: r.TypeUrl,
		RemovedResources: r.RemovedResources, RemovedResourceNames: r.RemovedResourceNames, Nonce: r.Nonce,
		ControlPlane: r.ControlPlane}
}

func (r *deltaResponse) entries() int {
	return preparedEntries(r.prepared, len(r.Resources))
}

func (r *deltaResponse) entry(i int) []byte { return r.prepared[i].DeltaWire() }

// requestBuffers gathers a request that arrived in several pieces (HTTP/2
// frames) into one buffer for decoding. Unlike gRPC's default pool it does
// not clear a buffer it reuses: the request's bytes overwrite the whole
// length asked for, and the decoder reads no further. An Envoy's SotW ACK
// names every EDS cluster it holds (~60 KB for 1,000), and under endpoint
// churn clearing those buffers cost about as much as decoding them.
var requestBuffers mem.BufferPool = &dirtyPool{}

// dirtyPool is a mem.BufferPool of power-of-two buffers from 256 B to
// 4 MiB (larger ones are allocated and dropped) that hands reused buffers
// out uncleared. Safe for concurrent use.
type dirtyPool struct {
	tiers [dirtyPoolMaxShift - dirtyPoolMinShift + 1]sync.Pool
}

const (
	dirtyPoolMinShift = 8
	dirtyPoolMaxShift = 22
)

// tier is the index of the smallest tier holding n bytes, -1 if none does.
func (p *dirtyPool) tier(n int) int {
	shift := max(bits.Len(uint(n-1)), dirtyPoolMinShift)
	if n <= 0 {
		shift = dirtyPoolMinShift
	}
	if shift > dirtyPoolMaxShift {
		return -1
	}
	return shift - dirtyPoolMinShift
}

func (p *dirtyPool) Get(length int) *[]byte {
	t := p.tier(length)
	if t < 0 {
		b := make([]byte, length)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:length]
		return b
	}
	b := make([]byte, length, 1<<(t+dirtyPoolMinShift))
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if t := p.tier(c); t >= 0 && c == 1<<(t+dirtyPoolMinShift) {
		p.tiers[t].Put(b)
	}
}
