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
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		return unmarshalRequest(buf.ReadOnlyData(), req, sharedNames)
	}
	return c.base.Unmarshal(data, v)
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch r := v.(type) {
	case *sotwResponse:
		if len(r.prepared) == len(r.Resources) {
			return write(&discoveryv3.DiscoveryResponse{VersionInfo: r.VersionInfo, Canary: r.Canary,
				TypeUrl: r.TypeUrl, Nonce: r.Nonce, ControlPlane: r.ControlPlane}, r.prepared, (*resource.Prepared).Wire, v, c.base)
		}
	case *deltaResponse:
		if len(r.prepared) == len(r.Resources) {
			return write(&discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: r.SystemVersionInfo, TypeUrl: r.TypeUrl,
				RemovedResources: r.RemovedResources, RemovedResourceNames: r.RemovedResourceNames, Nonce: r.Nonce,
				ControlPlane: r.ControlPlane}, r.prepared, (*resource.Prepared).DeltaWire, v, c.base)
		}
	}
	return c.base.Marshal(v)
}

// write encodes head (a response without its resources), then each
// prepared resource's entry as entry returns it; v through base if one
// has none. Fields may come in any order on the wire, and the resources
// are field 2 of both response types.
func write(head proto.Message, prepared []*resource.Prepared, entry func(*resource.Prepared) []byte, v any, base encoding.CodecV2) (mem.BufferSlice, error) {
	for _, p := range prepared {
		if entry(p) == nil {
			return base.Marshal(v)
		}
	}
	h, err := proto.Marshal(head)
	if err != nil {
		return nil, err
	}
	out := make(mem.BufferSlice, 0, 1+len(prepared))
	out = append(out, mem.SliceBuffer(h))
	for _, p := range prepared {
		out = append(out, mem.SliceBuffer(entry(p)))
	}
	return out, nil
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
