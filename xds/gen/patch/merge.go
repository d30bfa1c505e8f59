package patch

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

var durationName = protoreflect.FullName("google.protobuf.Duration")

// merge merges src into dst as proto.Merge does (scalars and messages
// set in src replace or merge into dst's, lists append, maps merge by
// key), except that a Duration is replaced whole, as Istio's merge does
// (proto.Merge of 1.5s into 2s would give 1.5s, but of 3s into 1.5s,
// 3.5s). src is not retained.
func merge(dst, src proto.Message) {
	mergeMessage(dst.ProtoReflect(), src.ProtoReflect(), 0)
}

// mergeMessage merges src into dst, leaving out field number skip (0:
// none).
func mergeMessage(dst, src protoreflect.Message, skip protoreflect.FieldNumber) {
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Number() == skip:
		case fd.IsList():
			dl, sl := dst.Mutable(fd).List(), v.List()
			for i := 0; i < sl.Len(); i++ {
				dl.Append(copyValue(fd, sl.Get(i)))
			}
		case fd.IsMap():
			dm := dst.Mutable(fd).Map()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				dm.Set(k, copyValue(fd.MapValue(), mv))
				return true
			})
		case fd.Message() != nil:
			if !dst.Has(fd) || fd.Message().FullName() == durationName {
				dst.Set(fd, copyValue(fd, v))
			} else {
				mergeMessage(dst.Mutable(fd).Message(), v.Message(), 0)
			}
		default:
			dst.Set(fd, copyValue(fd, v))
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(append(dst.GetUnknown(), u...))
	}
}

// copyValue copies a singular value of field fd (a list element or map
// value when fd is one).
func copyValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) protoreflect.Value {
	switch {
	case fd.Message() != nil:
		return protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect())
	case fd.Kind() == protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(append([]byte(nil), v.Bytes()...))
	}
	return v
}

// mergeAny merges the message src holds into the one dst holds; they must
// be of one type (as Istio's MergeAnyWithAny). A nil dst takes src.
func mergeAny(dst, src *anypb.Any) (*anypb.Any, error) {
	if dst == nil {
		return proto.Clone(src).(*anypb.Any), nil
	}
	if dst.GetTypeUrl() != src.GetTypeUrl() {
		return nil, fmt.Errorf("cannot merge a %s into a %s", src.GetTypeUrl(), dst.GetTypeUrl())
	}
	d, err := dst.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("reading the generated %s: %w", dst.GetTypeUrl(), err)
	}
	sv, err := src.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("reading the patch's %s: %w", src.GetTypeUrl(), err)
	}
	merge(d, sv)
	return anypb.New(d)
}

// mergeTransportSocket merges a patch's transport socket into a
// generated one of the same name (their typed configs merged); otherwise
// the patch's replaces it.
func mergeTransportSocket(dst, src *corev3.TransportSocket) (*corev3.TransportSocket, error) {
	if dst == nil || dst.GetName() != src.GetName() || dst.GetTypedConfig() == nil || src.GetTypedConfig() == nil {
		return proto.Clone(src).(*corev3.TransportSocket), nil
	}
	tc, err := mergeAny(dst.GetTypedConfig(), src.GetTypedConfig())
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{Name: dst.GetName(), ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tc}}, nil
}

// shallowClone copies m's fields into a new message, sharing their
// values (lists, maps and sub-messages) with m: only mergeShared may
// then change it.
func shallowClone(m proto.Message) proto.Message {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	return dst.Interface()
}

// mergeShared is merge for a dst whose field values may be shared with
// other messages (shallowClone's): it replaces what it changes, never
// changing a value in place.
func mergeShared(dst, src proto.Message) {
	d := dst.ProtoReflect()
	src.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			nl := d.NewField(fd).List()
			old := d.Get(fd).List()
			for i := 0; i < old.Len(); i++ {
				nl.Append(old.Get(i))
			}
			for i := 0; i < v.List().Len(); i++ {
				nl.Append(copyValue(fd, v.List().Get(i)))
			}
			d.Set(fd, protoreflect.ValueOfList(nl))
		case fd.IsMap():
			nm := d.NewField(fd).Map()
			d.Get(fd).Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				nm.Set(k, mv)
				return true
			})
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				nm.Set(k, copyValue(fd.MapValue(), mv))
				return true
			})
			d.Set(fd, protoreflect.ValueOfMap(nm))
		case fd.Message() != nil && d.Has(fd) && fd.Message().FullName() != durationName:
			c := proto.Clone(d.Get(fd).Message().Interface())
			mergeMessage(c.ProtoReflect(), v.Message(), 0)
			d.Set(fd, protoreflect.ValueOfMessage(c.ProtoReflect()))
		default:
			d.Set(fd, copyValue(fd, v))
		}
		return true
	})
}
