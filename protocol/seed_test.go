package protocol

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestWriteFuzzSeeds regenerates the committed seed corpus of FuzzDecode
// when NAVE_WRITE_SEEDS=1; otherwise it checks the corpus is present.
func TestWriteFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if os.Getenv("NAVE_WRITE_SEEDS") != "1" {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) < 5 {
			t.Fatalf("seed corpus %s missing or small (%d): run NAVE_WRITE_SEEDS=1 go test -run TestWriteFuzzSeeds ./protocol", dir, len(entries))
		}
		return
	}
	o := decodeOne(t, vsYAML)
	good, err := Encode(o)
	if err != nil {
		t.Fatal(err)
	}
	msgs := map[string]*discoveryv3.DeltaDiscoveryResponse{
		"valid":       {TypeUrl: o.Kind.TypeURL, Nonce: "1", Resources: []*discoveryv3.Resource{good}},
		"synced":      {TypeUrl: SyncedTypeURL, Nonce: "2"},
		"removal":     {TypeUrl: o.Kind.TypeURL, Nonce: "3", RemovedResources: []string{"demo/echo"}},
		"unknowntype": {TypeUrl: "type.googleapis.com/x.Y", Nonce: "4", Resources: []*discoveryv3.Resource{good}},
		"garbled":     {TypeUrl: o.Kind.TypeURL, Nonce: "5", Resources: []*discoveryv3.Resource{{Name: "a/b", Resource: &anypb.Any{TypeUrl: EnvelopeTypeURL, Value: []byte{1, 2, 3, 0xff}}}}},
		"mismatch":    {TypeUrl: o.Kind.TypeURL, Nonce: "6", Resources: []*discoveryv3.Resource{{Name: "x/y", Resource: good.Resource}}},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
