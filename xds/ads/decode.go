package ads

import (
	"bytes"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// resourceNamesField is DiscoveryRequest.resource_names, and
// resourceNamesTag its tag as encoders write it (one byte).
const (
	resourceNamesField = 3
	resourceNamesTag   = byte(resourceNamesField<<3 | protowire.BytesType)
)

// unmarshalRequest decodes a state-of-the-world request into req as
// proto.Unmarshal does, but when its resource names — one run of field 3
// on the wire, as every encoder writes them — are those of a subscription
// some stream holds (sets), it takes that subscription's list instead of
// decoding a string per name: an Envoy sidecar repeats its thousand EDS
// names in every ACK, and sidecars of one view list the same ones, so the
// hub decoded (allocated and checked) the same strings over and over.
func unmarshalRequest(b []byte, req *discoveryv3.DiscoveryRequest, sets *nameSets) error {
	list, start, end := sets.encodedIn(b)
	if list == nil {
		return proto.Unmarshal(b, req)
	}
	if err := proto.Unmarshal(b[:start], req); err != nil {
		return err
	}
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b[end:], req); err != nil {
		return err
	}
	req.ResourceNames = list
	return nil
}

// encodedIn finds the names of a live subscription in an encoded request:
// its list and the bytes [start, end) of the request's resource names, if
// they are one contiguous run of field 3 encoding exactly that list as
// the subscription's own encoding does (nameSet.wire); nil otherwise
// (then the request is decoded as usual). The run is looked up by its
// runKey (its length and a sample of its bytes) and compared whole, not
// name by name.
func (n *nameSets) encodedIn(b []byte) (list []string, start, end int) {
	start, end = -1, -1
	for i := 0; i < len(b); {
		if b[i] == resourceNamesTag {
			// A name, read without the general field walk below: an
			// EDS ACK is a thousand of them.
			var l uint64
			ll := 1 // the length's bytes
			if i+1 < len(b) && b[i+1] < 0x80 {
				l = uint64(b[i+1]) // a name shorter than 128 bytes
			} else {
				l, ll = protowire.ConsumeVarint(b[i+1:])
			}
			if ll < 0 || l > uint64(len(b)-i-1-ll) {
				return nil, 0, 0
			}
			if end >= 0 && end != i {
				return nil, 0, 0 // not one run: decode it as it is
			}
			if start < 0 {
				start = i
			}
			i += 1 + ll + int(l)
			end = i
			continue
		}
		num, typ, tl := protowire.ConsumeTag(b[i:])
		if tl < 0 {
			return nil, 0, 0
		}
		fl := protowire.ConsumeFieldValue(num, typ, b[i+tl:])
		if fl < 0 {
			return nil, 0, 0
		}
		if num == resourceNamesField {
			if typ != protowire.BytesType || end >= 0 && end != i {
				return nil, 0, 0 // not one run: decode it as it is
			}
			if start < 0 {
				start = i
			}
			end = i + tl + fl
		}
		i += tl + fl
	}
	if start < 0 {
		return nil, 0, 0
	}
	run := b[start:end]
	for _, s := range n.live(n.runKey(run)) {
		if bytes.Equal(s.wire, run) {
			return s.list, start, end
		}
	}
	return nil, 0, 0
}

// live returns the subscriptions of run key sum still held.
func (n *nameSets) live(sum uint64) []*nameSet {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*nameSet
	for _, wp := range n.runs[sum] {
		if s := wp.Value(); s != nil {
			out = append(out, s)
		}
	}
	return out
}
