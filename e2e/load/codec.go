package load

import (
	"errors"
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// rawCodec is the ADS streams' gRPC codec: requests are marshalled as
// usual; a response is copied once into a pooled buffer and read in place
// with protowire (see parseResponse), instead of being unmarshalled into
// DiscoveryResponse with a second copy of every resource's bytes. At 500
// proxies receiving 1.2 MB each this halves the load generator's own CPU,
// which shares the machine with the hub. The wire format is protobuf's:
// the content-subtype stays "proto".
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*sotwRequest); ok {
		b, err := r.marshal()
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	m.buf = data.MaterializeToBuffer(mem.DefaultBufferPool())
	return nil
}

// sotwRequest is a state-of-the-world DiscoveryRequest whose resource
// names come encoded: every ACK of a named type repeats the whole
// subscription (953 EDS names, 45 KB, per ACK in S3), and marshalling the
// names afresh (with UTF-8 checks) was a third of the load generator's CPU
// in S3, taken from the hub on a shared machine. names is the
// subscription's run of field 3, encoded once per subscription change
// (typeState.wantWire) and shared: read only. marshal writes the bytes
// proto.Marshal writes for the equivalent DiscoveryRequest, fields in
// number order (TestSOTWRequestBytes).
type sotwRequest struct {
	version, typeURL, nonce string
	node                    *corev3.Node
	names                   []byte
}

// DiscoveryRequest's field numbers.
const (
	requestVersionField = 1
	requestNodeField    = 2
	requestNamesField   = 3
	requestTypeURLField = 4
	requestNonceField   = 5
)

func (r *sotwRequest) marshal() ([]byte, error) {
	b := make([]byte, 0, len(r.version)+len(r.names)+len(r.typeURL)+len(r.nonce)+16)
	if r.version != "" {
		b = protowire.AppendTag(b, requestVersionField, protowire.BytesType)
		b = protowire.AppendString(b, r.version)
	}
	if r.node != nil {
		nb, err := proto.Marshal(r.node)
		if err != nil {
			return nil, fmt.Errorf("marshal node: %w", err)
		}
		b = protowire.AppendTag(b, requestNodeField, protowire.BytesType)
		b = protowire.AppendBytes(b, nb)
	}
	b = append(b, r.names...)
	if r.typeURL != "" {
		b = protowire.AppendTag(b, requestTypeURLField, protowire.BytesType)
		b = protowire.AppendString(b, r.typeURL)
	}
	if r.nonce != "" {
		b = protowire.AppendTag(b, requestNonceField, protowire.BytesType)
		b = protowire.AppendString(b, r.nonce)
	}
	return b, nil
}

// appendNames appends names as DiscoveryRequest's resource_names run.
func appendNames(b []byte, names []string) []byte {
	for _, n := range names {
		b = protowire.AppendTag(b, requestNamesField, protowire.BytesType)
		b = protowire.AppendString(b, n)
	}
	return b
}

// rawMessage holds one received message until Free.
type rawMessage struct{ buf mem.Buffer }

func (m *rawMessage) bytes() []byte { return m.buf.ReadOnlyData() }

func (m *rawMessage) free() {
	if m.buf != nil {
		m.buf.Free()
		m.buf = nil
	}
}

// rawResponse is a DiscoveryResponse or DeltaDiscoveryResponse as read in
// place: the byte slices alias the message and are valid until it is
// freed. Reused from one response to the next.
type rawResponse struct {
	typeURL, version, nonce string
	size                    int
	resources               []rawResource
	removed                 [][]byte
}

// rawResource is one resource: its name (delta only; state-of-the-world
// names are inside the value) and its serialized value.
type rawResource struct {
	name, value []byte
}

var errMalformed = errors.New("malformed discovery response")

// parseResponse reads a (Delta)DiscoveryResponse: version_info or
// system_version_info (1), resources (2: Any, or Resource with name 3 and
// resource 2), type_url (4), nonce (5), removed_resources (6, delta).
func parseResponse(b []byte, delta bool, out *rawResponse) error {
	out.typeURL, out.version, out.nonce, out.size = "", "", "", len(b)
	out.resources, out.removed = out.resources[:0], out.removed[:0]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return errMalformed
			}
			b = b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return errMalformed
		}
		b = b[m:]
		switch num {
		case 1:
			out.version = string(v)
		case 2:
			var r rawResource
			if delta {
				r.name = field(v, 3)
				v = field(v, 2) // the Any
			}
			r.value = field(v, 2)
			out.resources = append(out.resources, r)
		case 4:
			out.typeURL = string(v)
		case 5:
			out.nonce = string(v)
		case 6:
			if delta {
				out.removed = append(out.removed, v)
			}
		}
	}
	return nil
}
