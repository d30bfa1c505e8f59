package meshconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// specJSON decodes specs: an unknown field is an error, never dropped.
var specJSON = protojson.UnmarshalOptions{DiscardUnknown: false}

// decodeSpec decodes a spec from JSON with protojson, unknown fields
// being errors, after normalizing durations (normalizeDurations). On
// failure it returns the path of the innermost part that fails on its own
// (spec.http[0].route[0].weight) and protojson's reason, without its JSON
// line and column: they count in the converted JSON, not the user's YAML.
func decodeSpec(raw json.RawMessage, spec proto.Message) (field, reason string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "spec", err.Error()
	}
	m := spec.ProtoReflect()
	normalizeDurations(m.Descriptor(), v)
	js, err := json.Marshal(v)
	if err != nil {
		return "spec", err.Error()
	}
	err = specJSON.Unmarshal(js, spec)
	if err == nil {
		return "", ""
	}
	// protojson names the offending field but not where it is. Decoding
	// the spec's parts one by one, from the outside in, finds it; that
	// costs depth × size, and only on the error path.
	if p, perr := locate(m.Descriptor(), m.Type(), v, "spec"); perr != nil {
		return p, cleanProtoError(perr)
	}
	return "spec", cleanProtoError(err)
}

// locate returns the path and error of the innermost failing part of v,
// decoded as a message of type mt, or a nil error if v decodes.
func locate(md protoreflect.MessageDescriptor, mt protoreflect.MessageType, v any, path string) (string, error) {
	err := decodeAs(mt, v)
	if err == nil {
		return "", nil
	}
	obj, ok := v.(map[string]any)
	if !ok || isWellKnown(md) {
		return path, err
	}
	for _, k := range sortedMapKeys(obj) {
		fd := fieldByJSONKey(md, k)
		if fd == nil {
			return path + "." + k, fmt.Errorf("unknown field %q", k)
		}
		if p, ferr := locateField(mt, fd, k, obj[k], path+"."+k); ferr != nil {
			return p, ferr
		}
	}
	return path, err
}

// locateField finds the failing part of one field's value.
func locateField(parent protoreflect.MessageType, fd protoreflect.FieldDescriptor, key string, v any, path string) (string, error) {
	// The field alone, in an otherwise empty parent, pins scalar errors.
	err := decodeAs(parent, map[string]any{key: v})
	if err == nil {
		return "", nil
	}
	child := messageField(fd)
	if child == nil {
		return path, err
	}
	childType := childMessageType(parent, fd)
	switch {
	case fd.IsMap():
		if m, ok := v.(map[string]any); ok {
			for _, mk := range sortedMapKeys(m) {
				if p, err := locate(child, childType, m[mk], path+"["+mk+"]"); err != nil {
					return p, err
				}
			}
		}
	case fd.IsList():
		if l, ok := v.([]any); ok {
			for i, e := range l {
				if p, err := locate(child, childType, e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return p, err
				}
			}
		}
	default:
		if p, err := locate(child, childType, v, path); err != nil {
			return p, err
		}
	}
	return path, err
}

func decodeAs(mt protoreflect.MessageType, v any) error {
	js, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return specJSON.Unmarshal(js, mt.New().Interface())
}

// fieldByJSONKey finds a field the way protojson does: by JSON name, then
// by proto name.
func fieldByJSONKey(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	if fd := md.Fields().ByJSONName(key); fd != nil {
		return fd
	}
	return md.Fields().ByTextName(key)
}

// messageField is the message type of a field's values (a map's values),
// or nil for scalars and well-known types, which protojson decodes from
// scalars.
func messageField(fd protoreflect.FieldDescriptor) protoreflect.MessageDescriptor {
	if fd.IsMap() {
		fd = fd.MapValue()
	}
	md := fd.Message()
	if md == nil || isWellKnown(md) {
		return nil
	}
	return md
}

// childMessageType is the message type of a field's values, taken from a
// new parent so that generated types are used where they exist.
func childMessageType(parent protoreflect.MessageType, fd protoreflect.FieldDescriptor) protoreflect.MessageType {
	m := parent.New()
	switch {
	case fd.IsMap():
		return m.NewField(fd).Map().NewValue().Message().Type()
	case fd.IsList():
		return m.NewField(fd).List().NewElement().Message().Type()
	default:
		return m.NewField(fd).Message().Type()
	}
}

func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

var (
	protoErrorPrefix = regexp.MustCompile(`^proto:[\s\x{00a0}]*(syntax error:?[\s\x{00a0}]*)?(\(line \d+:\d+\):[\s\x{00a0}]*)?`)
	protoOneofError  = regexp.MustCompile(`^error parsing "(\w+)", oneof [\w.]*\.(\w+) is already set$`)
)

// cleanProtoError drops protojson's "proto:" prefix and JSON position, and
// rewords what reads too much like protobuf internals.
func cleanProtoError(err error) string {
	msg := shorten(strings.TrimSpace(protoErrorPrefix.ReplaceAllString(err.Error(), "")))
	if m := protoOneofError.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%q is set together with another field of %s; set only one", m[1], m[2])
	}
	return msg
}

// maxReason bounds a reason quoting user input, such as a huge value.
const maxReason = 512

// shorten cuts a reason to maxReason bytes, on a rune boundary.
func shorten(s string) string {
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
