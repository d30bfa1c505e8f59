package protocol

import (
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
)

const vsYAML = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo, labels: {team: a}, creationTimestamp: "2026-01-02T03:04:05Z"}
spec:
  hosts: [echo.demo.svc.cluster.local]
  http:
  - route:
    - {destination: {host: echo.demo.svc.cluster.local, subset: v1}, weight: 80}
    - {destination: {host: echo.demo.svc.cluster.local, subset: v2}, weight: 20}
`

func decodeOne(t *testing.T, y string) *meshconfig.Object {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(y), "test.yaml")
	if len(errs) > 0 || len(objs) != 1 {
		t.Fatalf("decode: %v %v", objs, errs)
	}
	return objs[0]
}

func TestRoundTrip(t *testing.T) {
	o := decodeOne(t, vsYAML)
	r, err := Encode(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "demo/echo" || r.Version != o.Version {
		t.Fatalf("resource name/version = %q/%q", r.Name, r.Version)
	}
	// Through the wire and back.
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
	if got.Key() != o.Key() || got.Version != o.Version || !got.CreationTime.Equal(o.CreationTime) ||
		got.Labels["team"] != "a" || !proto.Equal(got.Spec, o.Spec) || got.Origin != o.Origin {
		t.Fatalf("round trip changed the object:\n got %+v\nwant %+v", got, o)
	}
}

func TestDecodeRefusesWithReason(t *testing.T) {
	o := decodeOne(t, vsYAML)
	good, err := Encode(o)
	if err != nil {
		t.Fatal(err)
	}
	envelope := func(mut func(*protocolv1.Envelope)) *discoveryv3.Resource {
		var env protocolv1.Envelope
		if err := good.Resource.UnmarshalTo(&env); err != nil {
			t.Fatal(err)
		}
		mut(&env)
		body, _ := anypb.New(&env)
		return &discoveryv3.Resource{Name: meshconfig.Key(env.Namespace, env.Name), Resource: body}
	}
	badSpec, _ := anypb.New(&networking.VirtualService{Hosts: []string{"a.b"}, Http: []*networking.HTTPRoute{{
		Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "a.b"}, Weight: 30},
			{Destination: &networking.Destination{Host: "a.b"}, Weight: 30}}}}})
	drSpec, _ := anypb.New(&networking.DestinationRule{Host: "a.b"})
	cases := []struct {
		name    string
		typeURL string
		res     *discoveryv3.Resource
		want    string
	}{
		{"nil", o.Kind.TypeURL, nil, "empty"},
		{"unknown type", "type.googleapis.com/foo.Bar", good, "unknown type URL"},
		{"no body", o.Kind.TypeURL, &discoveryv3.Resource{Name: "demo/echo"}, "no body"},
		{"wrong body type", o.Kind.TypeURL, &discoveryv3.Resource{Name: "demo/echo", Resource: drSpec}, "body is"},
		{"garbled envelope", o.Kind.TypeURL, &discoveryv3.Resource{Name: "demo/echo", Resource: &anypb.Any{TypeUrl: EnvelopeTypeURL, Value: []byte{0xff, 0xff, 0xff}}}, "envelope does not decode"},
		{"name mismatch", o.Kind.TypeURL, &discoveryv3.Resource{Name: "other/echo", Resource: good.Resource}, "does not match"},
		{"spec of another kind", o.Kind.TypeURL, envelope(func(e *protocolv1.Envelope) { e.Spec = drSpec }), "spec is"},
		{"no spec", o.Kind.TypeURL, envelope(func(e *protocolv1.Envelope) { e.Spec = nil }), "no spec"},
		{"invalid spec", o.Kind.TypeURL, envelope(func(e *protocolv1.Envelope) { e.Spec = badSpec }), "invalid"},
		{"long name", o.Kind.TypeURL, &discoveryv3.Resource{Name: strings.Repeat("x", 600), Resource: good.Resource}, "longer than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.typeURL, c.res)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decode error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestRejectionsFromNACK(t *testing.T) {
	items := &protocolv1.Rejections{Items: []*protocolv1.Rejection{{TypeUrl: "t", Name: "ns/a", Reason: "bad"}}}
	detail, _ := anypb.New(items)
	req := &discoveryv3.DeltaDiscoveryRequest{}
	if Rejections(req) != nil {
		t.Fatal("an ACK has no rejections")
	}
	req.ErrorDetail = &statusProto{Message: "x", Details: []*anypb.Any{detail}}
	got := Rejections(req)
	if len(got) != 1 || got[0].GetName() != "ns/a" || got[0].GetReason() != "bad" {
		t.Fatalf("Rejections = %v", got)
	}
}
