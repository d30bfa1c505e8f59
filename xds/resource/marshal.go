package resource

import (
	"crypto/sha256"
	"encoding/hex"

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
// generated message always does).
func Prepare(typeURL string, r gen.Resource) *Prepared {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Message)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(b)
	return &Prepared{Name: r.Name, Any: &anypb.Any{TypeUrl: typeURL, Value: b}, Hash: hex.EncodeToString(sum[:8])}
}

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
