package build

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestEncoderRandom fills route configurations at random (every field
// kind, oneofs, maps, lists, sub-messages shared between routes, virtual
// hosts and configurations) and checks that the Encoder's bytes are
// proto.Marshal's (deterministic), also for the second configuration of a
// pair that shares sub-messages with the first (encoded from the memo).
//
// Every other seed fills mostly the fields the Encoder writes itself,
// sometimes one more (which it must see and leave to protobuf-go).
func TestEncoderRandom(t *testing.T) {
	for seed := range uint64(600) {
		r := rand.New(rand.NewPCG(seed, 26))
		f := filler{r: r, plain: seed%2 == 0}
		var enc Encoder
		for range 3 {
			rc := &routev3.RouteConfiguration{}
			f.fill(rc.ProtoReflect(), 0)
			got, err := enc.Marshal(rc)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			want, err := deterministic.Marshal(rc)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("seed %d: encoded %d bytes, proto.Marshal %d", seed, len(got), len(want))
			}
			back := &routev3.RouteConfiguration{}
			if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, rc) {
				t.Fatalf("seed %d: decodes to a different message (%v)", seed, err)
			}
		}
	}
}

// filler sets random fields of messages; sub-messages already made are
// reused (shared by pointer) a third of the time.
type filler struct {
	r     *rand.Rand
	made  map[protoreflect.FullName][]protoreflect.Message
	plain bool // fill mostly the fields of plainFields
}

// plainFields are the fields the Encoder writes itself, by message.
var plainFields = map[protoreflect.FullName][]protoreflect.Name{
	"envoy.config.route.v3.RouteConfiguration": {"name", "virtual_hosts", "validate_clusters"},
	"envoy.config.route.v3.VirtualHost":        {"name", "domains", "routes"},
	"envoy.config.route.v3.Route":              {"name", "match", "decorator", "route"},
	"envoy.config.route.v3.RouteAction":        {"cluster", "weighted_clusters", "prefix_rewrite", "timeout", "retry_policy", "hash_policy"},
}

func (f *filler) fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if f.r.IntN(3) != 0 && !(depth == 0 && fd.Name() == "virtual_hosts") && !(depth == 1 && fd.Name() == "routes") {
			continue
		}
		if names, ok := plainFields[m.Descriptor().FullName()]; ok && f.plain && !slices.Contains(names, fd.Name()) && f.r.IntN(20) != 0 {
			continue
		}
		switch {
		case fd.IsMap():
			if depth > 3 || fd.MapValue().Kind() == protoreflect.MessageKind && depth > 2 {
				continue
			}
			mp := m.Mutable(fd).Map()
			for range f.r.IntN(4) {
				mp.Set(f.scalar(fd.MapKey()).MapKey(), f.value(fd.MapValue(), func() protoreflect.Message { return mp.NewValue().Message() }, depth))
			}
		case fd.IsList():
			if fd.Kind() == protoreflect.MessageKind && depth > 4 {
				continue
			}
			l := m.Mutable(fd).List()
			for range 1 + f.r.IntN(4) {
				l.Append(f.value(fd, func() protoreflect.Message { return l.NewElement().Message() }, depth))
			}
		default:
			if fd.Kind() == protoreflect.MessageKind && depth > 4 {
				continue
			}
			m.Set(fd, f.value(fd, func() protoreflect.Message { return m.NewField(fd).Message() }, depth))
		}
	}
}

// value is a random value of fd's kind (for a message, one newMsg made
// or an earlier one of its type).
func (f *filler) value(fd protoreflect.FieldDescriptor, newMsg func() protoreflect.Message, depth int) protoreflect.Value {
	if fd.Kind() != protoreflect.MessageKind {
		return f.scalar(fd)
	}
	name := fd.Message().FullName()
	if made := f.made[name]; len(made) > 0 && f.r.IntN(3) == 0 {
		return protoreflect.ValueOfMessage(made[f.r.IntN(len(made))])
	}
	sub := newMsg()
	if name == "google.protobuf.Any" {
		// An Any's value is bytes of its type; any bytes marshal.
		sub.Set(sub.Descriptor().Fields().ByName("type_url"), protoreflect.ValueOfString("type.googleapis.com/x"))
		sub.Set(sub.Descriptor().Fields().ByName("value"), protoreflect.ValueOfBytes([]byte{byte(f.r.IntN(256))}))
	} else {
		f.fill(sub, depth+1)
	}
	if f.made == nil {
		f.made = map[protoreflect.FullName][]protoreflect.Message{}
	}
	f.made[name] = append(f.made[name], sub)
	return protoreflect.ValueOfMessage(sub)
}

func (f *filler) scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	r := f.r
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(r.IntN(vs.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(r.Uint32()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(r.Uint64()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(r.Uint32() >> r.IntN(32))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(r.Uint64() >> r.IntN(64))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(r.Float32() * 100)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(r.NormFloat64())
	case protoreflect.StringKind:
		return protoreflect.ValueOfString([]string{"", "a", "route", "ünï"}[r.IntN(4)])
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("b")[:r.IntN(2)])
	}
	panic("kind " + fd.Kind().String())
}
