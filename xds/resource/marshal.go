package resource

import (
	"crypto/sha256"
	"encoding/hex"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/xds/gen"
)

// Marshal serializes every resource deterministically and hashes it.
func Marshal(byType map[string][]gen.Resource) map[string][]*Prepared {
	res := make(map[string][]*Prepared, len(byType))
	for t, list := range byType {
		res[t] = MarshalList(t, list)
	}
	return res
}

// MarshalList is Marshal for the resources of one type.
func MarshalList(typeURL string, list []gen.Resource) []*Prepared {
	ps := make([]*Prepared, 0, len(list))
	for _, r := range list {
		if p := Prepare(typeURL, r); p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// Prepare marshals one resource (nil if it does not marshal, which a
// generated message always does), into the buffer that also holds its
// encoding as a DiscoveryResponse entry (Prepared.Wire).
func Prepare(typeURL string, r gen.Resource) *Prepared {
	size := proto.Size(r.Message)
	// wire: resources tag, Any length, Any.type_url (field 1), Any.value
	// (field 2) tag and length, then the value.
	anyLen := 1 + protowire.SizeBytes(len(typeURL)) + 1 + protowire.SizeBytes(size)
	wire := make([]byte, 0, 1+protowire.SizeBytes(anyLen))
	wire = protowire.AppendTag(wire, responseResourcesField, protowire.BytesType)
	wire = protowire.AppendVarint(wire, uint64(anyLen))
	wire = protowire.AppendTag(wire, anyTypeURLField, protowire.BytesType)
	wire = protowire.AppendString(wire, typeURL)
	wire = protowire.AppendTag(wire, anyValueField, protowire.BytesType)
	wire = protowire.AppendVarint(wire, uint64(size))
	start := len(wire)
	// Size cached the message's sizes: the marshal reuses them.
	wire, err := proto.MarshalOptions{Deterministic: true, UseCachedSize: true}.MarshalAppend(wire, r.Message)
	if err != nil || len(wire)-start != size {
		return nil
	}
	b := wire[start:len(wire):len(wire)]
	sum := sha256.Sum256(b)
	return &Prepared{Name: r.Name, Any: &anypb.Any{TypeUrl: typeURL, Value: b}, Hash: hex.EncodeToString(sum[:8]), wire: wire}
}

// Field numbers of the encodings Prepare writes: DiscoveryResponse's
// resources, and google.protobuf.Any's type_url and value.
const (
	responseResourcesField protowire.Number = 2
	anyTypeURLField        protowire.Number = 1
	anyValueField          protowire.Number = 2
)

// MarshalReusing marshals every resource once. A resource whose bytes
// equal prev's reuses that Prepared, so unchanged resources keep their
// identity across publications.
func MarshalReusing(byType map[string][]gen.Resource, prev map[string]map[string]*Prepared) map[string]map[string]*Prepared {
	res := make(map[string]map[string]*Prepared, len(byType))
	for t, list := range Marshal(byType) {
		byName := make(map[string]*Prepared, len(list))
		for _, p := range list {
			if q, ok := prev[t][p.Name]; ok && q.Hash == p.Hash {
				p = q
			}
			byName[p.Name] = p
		}
		res[t] = byName
	}
	return res
}
