package ads

import (
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
// every other message it encodes and decodes as gRPC's proto codec does.
// A server without it sends the same bytes, encoded per stream.
func Codec() encoding.CodecV2 { return codec{base: encoding.GetCodecV2(grpcproto.Name)} }

type codec struct{ base encoding.CodecV2 }

func (c codec) Name() string { return c.base.Name() }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*sotwResponse)
	if !ok || len(r.prepared) != len(r.Resources) {
		return c.base.Marshal(v)
	}
	for _, p := range r.prepared {
		if p.Wire() == nil {
			return c.base.Marshal(v)
		}
	}
	// Fields may come in any order on the wire: the header's, then the
	// resources (field 2) as Prepare encoded them.
	head, err := proto.Marshal(&discoveryv3.DiscoveryResponse{VersionInfo: r.VersionInfo, Canary: r.Canary,
		TypeUrl: r.TypeUrl, Nonce: r.Nonce, ControlPlane: r.ControlPlane})
	if err != nil {
		return nil, err
	}
	out := make(mem.BufferSlice, 0, 1+len(r.prepared))
	out = append(out, mem.SliceBuffer(head))
	for _, p := range r.prepared {
		out = append(out, mem.SliceBuffer(p.Wire()))
	}
	return out, nil
}

// sotwResponse is a DiscoveryResponse (Resources set) with the Prepared
// its resources are, in the same order, for Codec to write their shared
// encodings. Under another codec it is the DiscoveryResponse it embeds.
type sotwResponse struct {
	*discoveryv3.DiscoveryResponse
	prepared []*resource.Prepared
}
