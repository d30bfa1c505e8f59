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
// generated message always does; Resource.Wire when its generator
// encoded it already) into one buffer that also holds its
// encodings as a response entry (Prepared.Wire, Prepared.DeltaWire).
func Prepare(typeURL string, r gen.Resource) *Prepared {
	size := len(r.Wire)
	if r.Wire == nil {
		size = proto.Size(r.Message)
	}
	// The delta entry (a discovery Resource: name, version, then the Any
	// as field 2) ends with the SotW entry (the Any as field 2), which
	// ends with the value: one buffer holds all three.
	anyLen := 1 + protowire.SizeBytes(len(typeURL)) + 1 + protowire.SizeBytes(size)
	sotwLen := 1 + protowire.SizeBytes(anyLen)
	resLen := 1 + protowire.SizeBytes(len(r.Name)) + 1 + protowire.SizeBytes(hashLen) + sotwLen
	wire := make([]byte, 0, 1+protowire.SizeBytes(resLen))
	wire = protowire.AppendTag(wire, deltaResourcesField, protowire.BytesType)
	wire = protowire.AppendVarint(wire, uint64(resLen))
	wire = protowire.AppendTag(wire, resourceNameField, protowire.BytesType)
	wire = protowire.AppendString(wire, r.Name)
	wire = protowire.AppendTag(wire, resourceVersionField, protowire.BytesType)
	wire = protowire.AppendVarint(wire, hashLen)
	hashAt := len(wire)
	wire = append(wire, make([]byte, hashLen)...) // the hash, once the value is written
	sotwAt := len(wire)
	wire = protowire.AppendTag(wire, responseResourcesField, protowire.BytesType)
	wire = protowire.AppendVarint(wire, uint64(anyLen))
	wire = protowire.AppendTag(wire, anyTypeURLField, protowire.BytesType)
	wire = protowire.AppendString(wire, typeURL)
	wire = protowire.AppendTag(wire, anyValueField, protowire.BytesType)
	wire = protowire.AppendVarint(wire, uint64(size))
	valueAt := len(wire)
	if r.Wire != nil {
		wire = append(wire, r.Wire...) // already encoded by its generator
	} else {
		// Size cached the message's sizes: the marshal reuses them.
		var err error
		wire, err = proto.MarshalOptions{Deterministic: true, UseCachedSize: true}.MarshalAppend(wire, r.Message)
		if err != nil || len(wire)-valueAt != size {
			return nil
		}
	}
	b := wire[valueAt:len(wire):len(wire)]
	sum := sha256.Sum256(b)
	hex.Encode(wire[hashAt:sotwAt], sum[:hashLen/2])
	return &Prepared{Name: r.Name, Any: &anypb.Any{TypeUrl: typeURL, Value: b}, Hash: string(wire[hashAt:sotwAt]), wire: wire, sotwAt: sotwAt}
}

// hashLen is the length of Prepared.Hash: hex of 8 bytes of SHA-256.
const hashLen = 16

// Field numbers of the encodings Prepare writes: the resources of a
// DiscoveryResponse and of a DeltaDiscoveryResponse, a discovery
// Resource's name and version (its resource is field 2 as in a
// DiscoveryResponse), and google.protobuf.Any's type_url and value.
const (
	responseResourcesField protowire.Number = 2
	deltaResourcesField    protowire.Number = 2
	resourceNameField      protowire.Number = 3
	resourceVersionField   protowire.Number = 1
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
