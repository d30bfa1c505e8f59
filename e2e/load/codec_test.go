package load

import (
	"bytes"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// A state-of-the-world request with encoded names is, on the wire, the
// DiscoveryRequest a client marshalling it whole sends: the same bytes
// without a node, the same message with one (a node's metadata is a map,
// whose order proto.Marshal does not fix).
func TestSOTWRequestBytes(t *testing.T) {
	names := []string{"outbound|80||svc-1.ns-1.svc.cluster.local", "outbound|80||svc-2.ns-2.svc.cluster.local", "ünïcode"}
	node := &corev3.Node{Id: "sidecar~10.128.0.1~p.ns-1~ns-1.svc.cluster.local", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		"NAMESPACE": structpb.NewStringValue("ns-1"), "LABELS": structpb.NewStringValue("app=x"),
	}}}
	for _, tc := range []struct {
		name string
		raw  *sotwRequest
		want *discoveryv3.DiscoveryRequest
	}{
		{"first", &sotwRequest{typeURL: typeURLs[typeEDS], names: appendNames(nil, names)},
			&discoveryv3.DiscoveryRequest{TypeUrl: typeURLs[typeEDS], ResourceNames: names}},
		{"ack", &sotwRequest{typeURL: typeURLs[typeEDS], version: "v42", nonce: "n7", names: appendNames(nil, names)},
			&discoveryv3.DiscoveryRequest{TypeUrl: typeURLs[typeEDS], VersionInfo: "v42", ResponseNonce: "n7", ResourceNames: names}},
		{"wildcard", &sotwRequest{typeURL: typeURLs[typeCDS], version: "v1", nonce: "n1"},
			&discoveryv3.DiscoveryRequest{TypeUrl: typeURLs[typeCDS], VersionInfo: "v1", ResponseNonce: "n1"}},
		{"empty subscription", &sotwRequest{typeURL: typeURLs[typeEDS], names: appendNames([]byte{}, nil)},
			&discoveryv3.DiscoveryRequest{TypeUrl: typeURLs[typeEDS]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.raw.marshal()
			if err != nil {
				t.Fatal(err)
			}
			want, err := proto.Marshal(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encoded\n%x\nproto.Marshal\n%x", got, want)
			}
			tc.raw.node, tc.want.Node = node, node
			got, err = tc.raw.marshal()
			if err != nil {
				t.Fatal(err)
			}
			var dec discoveryv3.DiscoveryRequest
			if err := proto.Unmarshal(got, &dec); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&dec, tc.want) {
				t.Errorf("with a node: decodes to %v, want %v", &dec, tc.want)
			}
		})
	}
}
