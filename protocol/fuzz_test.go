package protocol

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

type statusProto = statuspb.Status

// FuzzDecode feeds arbitrary bytes as a pushed message: decoding never
// panics, and whatever decodes survives a re-encode with the same key.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg discoveryv3.DeltaDiscoveryResponse
		if err := proto.Unmarshal(data, &msg); err != nil {
			return
		}
		for _, r := range msg.GetResources() {
			o, err := Decode(msg.GetTypeUrl(), r)
			if err != nil {
				if _, ok := err.(*DecodeError); !ok {
					t.Fatalf("error of type %T: %v", err, err)
				}
				continue
			}
			back, err := Encode(o)
			if err != nil {
				t.Fatalf("decoded object does not encode: %v", err)
			}
			if back.GetName() != r.GetName() {
				t.Fatalf("name %q became %q", r.GetName(), back.GetName())
			}
		}
		_ = Rejections(&discoveryv3.DeltaDiscoveryRequest{})
	})
}
