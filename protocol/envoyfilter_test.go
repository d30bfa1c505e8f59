package protocol

import (
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// TestEnvoyFilterRoundTrip: an EnvoyFilter crosses the spoke→hub wire
// whole (its patch values are Structs inside the spec), and the hub's
// decoding validates it again: one nave refuses is refused there too.
func TestEnvoyFilterRoundTrip(t *testing.T) {
	const ef = `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua, namespace: demo}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match: {context: SIDECAR_INBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}}
    patch:
      operation: INSERT_BEFORE
      value: {name: envoy.filters.http.lua, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, default_source_code: {inline_string: "function envoy_on_request(h) end"}}}
`
	o := decodeOne(t, ef)
	r, err := Encode(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var wire discoveryv3.Resource
	if err := proto.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	got, err := Decode(o.Kind.TypeURL, &wire)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key() != "demo/lua" || got.Version != o.Version || !proto.Equal(got.Spec, o.Spec) {
		t.Fatalf("round trip changed the EnvoyFilter:\n got %+v\nwant %+v", got, o)
	}

	// A spoke that skipped validation: the hub refuses what nave would
	// not apply, with the reason.
	var env protocolv1.Envelope
	if err := r.Resource.UnmarshalTo(&env); err != nil {
		t.Fatal(err)
	}
	env.Spec, _ = anypb.New(&networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
		ApplyTo: networking.EnvoyFilter_LISTENER,
		Patch:   &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_REPLACE, Value: &structpb.Struct{}},
	}}})
	body, _ := anypb.New(&env)
	_, err = Decode(o.Kind.TypeURL, &discoveryv3.Resource{Name: r.Name, Resource: body})
	if err == nil || !strings.Contains(err.Error(), "spec.configPatches[0].patch.operation") || !strings.Contains(err.Error(), "REPLACE is not supported for applyTo LISTENER") {
		t.Fatalf("Decode of a refused EnvoyFilter: %v", err)
	}
}
