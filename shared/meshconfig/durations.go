package meshconfig

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
)

const durationName = "google.protobuf.Duration"

// normalizeDurations rewrites, in place, every google.protobuf.Duration
// string of a decoded JSON value that Go's time.ParseDuration accepts
// ("5m", "30ms", "1h30m") into protojson's form ("300s", "0.030000000s").
// Istio reads durations that way, so existing YAML must keep working;
// protojson alone takes only seconds. Anything else is left for
// protojson to judge.
func normalizeDurations(md protoreflect.MessageDescriptor, v any) {
	obj, ok := v.(map[string]any)
	if !ok || isWellKnown(md) {
		return
	}
	for k, fv := range obj {
		fd := fieldByJSONKey(md, k)
		if fd == nil {
			continue
		}
		vd := fd
		if fd.IsMap() {
			vd = fd.MapValue()
		}
		child := vd.Message()
		if child == nil {
			continue
		}
		switch {
		case fd.IsMap():
			if m, ok := fv.(map[string]any); ok {
				for mk, mv := range m {
					m[mk] = normalizeValue(child, mv)
				}
			}
		case fd.IsList():
			if l, ok := fv.([]any); ok {
				for i, e := range l {
					l[i] = normalizeValue(child, e)
				}
			}
		default:
			obj[k] = normalizeValue(child, fv)
		}
	}
}

// normalizeValue returns v, a value of message type md, normalized.
func normalizeValue(md protoreflect.MessageDescriptor, v any) any {
	if md.FullName() != durationName {
		normalizeDurations(md, v)
		return v
	}
	s, ok := v.(string)
	if !ok {
		return v
	}
	d, err := time.ParseDuration(s)
	if err != nil || d == math.MinInt64 {
		return v
	}
	return protoDuration(d)
}

// protoDuration formats d as protojson writes a Duration.
func protoDuration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%d.%09ds", sign, d/time.Second, d%time.Second)
}
