// Package gentest holds what the generator rooms' tests share: building a
// snapshot from YAML, finding resources in an Output, and checking that
// generated messages validate (and that their generators' encodings are
// theirs). It imports no room, so that any room's own
// tests can use it. Its functions are safe for concurrent use (each
// fails only the test it is given).
package gentest

import (
	"bytes"
	"net"
	"slices"
	"strconv"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
)

// Snapshot builds mesh "m" from one YAML document per cluster name, every
// cluster synced and connected.
func Snapshot(t testing.TB, clusters map[string]string) *mesh.Snapshot {
	t.Helper()
	var in []mesh.ClusterInput
	for name, y := range clusters {
		objs, errs := meshconfig.DecodeYAML([]byte(y), name+".yaml")
		if len(errs) > 0 {
			t.Fatalf("decode: %v", errs)
		}
		in = append(in, mesh.ClusterInput{Name: name, Synced: true, Connected: true, Objects: objs})
	}
	return mesh.Build("m", in)
}

// Registry returns a registry object of the nave.io/v1 kind ("Service"
// or "Workload") with spec, as a spoke's Kubernetes source pushes it.
func Registry(t testing.TB, kind, name, namespace string, spec proto.Message) *meshconfig.Object {
	t.Helper()
	k, err := meshconfig.KindFor("nave.io/v1", kind)
	if err != nil {
		t.Fatal(err)
	}
	o := &meshconfig.Object{Kind: k, Name: name, Namespace: namespace, Spec: spec, Origin: "kubernetes"}
	o.Version = o.ComputeVersion()
	return o
}

// ByName returns the resource of typeURL named name in out, or the zero
// Resource (whose Message is nil).
func ByName(out *build.Output, typeURL, name string) build.Resource {
	for _, r := range out.Resources[typeURL] {
		if r.Name == name {
			return r
		}
	}
	return build.Resource{}
}

// ValidateAll fails t for every resource of out whose message does not
// pass its own ValidateAll (or has none), or whose Resource.Wire is not
// its encoding (CheckWire).
func ValidateAll(t testing.TB, out *build.Output) {
	t.Helper()
	for typeURL, rs := range out.Resources {
		for _, r := range rs {
			v, ok := r.Message.(interface{ ValidateAll() error })
			if !ok {
				t.Fatalf("%s %s has no ValidateAll", typeURL, r.Name)
			}
			if err := v.ValidateAll(); err != nil {
				t.Errorf("%s %s: %v", typeURL, r.Name, err)
			}
			CheckWire(t, typeURL, r)
		}
	}
}

// CheckWire fails t unless r's encoding by its generator (Resource.Wire),
// if it has one, is byte for byte the deterministic marshalling of its
// Message, as resource.Prepare would write it.
func CheckWire(t testing.TB, typeURL string, r build.Resource) {
	t.Helper()
	if r.Wire == nil {
		return
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Message)
	if err != nil {
		t.Fatalf("%s %s: %v", typeURL, r.Name, err)
	}
	if !bytes.Equal(r.Wire, want) {
		t.Errorf("%s %s: Resource.Wire (%d bytes) is not the message's encoding (%d bytes)", typeURL, r.Name, len(r.Wire), len(want))
	}
}

// AddressPorts renders the endpoints of an assignment as address:port,
// sorted.
func AddressPorts(a *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range a.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10)))
		}
	}
	slices.Sort(out)
	return out
}

// Names returns the names of rs, in order.
func Names(rs []build.Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

// UpstreamTLS decodes the TLS transport socket of cluster c; nil when c
// has no transport socket.
func UpstreamTLS(t testing.TB, c *clusterv3.Cluster) *tlsv3.UpstreamTlsContext {
	t.Helper()
	ts := c.GetTransportSocket()
	if ts == nil {
		return nil
	}
	if ts.GetName() != build.TLSTransportSocket {
		t.Fatalf("transport socket %q", ts.GetName())
	}
	var ctx tlsv3.UpstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		t.Fatal(err)
	}
	return &ctx
}
