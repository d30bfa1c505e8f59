package envoy

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/proxy"
)

// TestAutoMTLSContextBytes: the auto-mTLS context assembled from shared
// bytes and the cluster's SNI equals marshalling the whole message, for
// every cluster of a mesh (subsets and ports included), and still decodes
// to the message istioMutual builds.
func TestAutoMTLSContextBytes(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": memoConfig})
	for _, k := range []string{"demo", "other"} {
		v := scope.New(snap, benchSidecarKeyIn(k))
		b := newCDSBuilder(v)
		n := 0
		outboundClusters(v, func(oc *outboundCluster) {
			n++
			got := b.autoMTLSContext(oc)
			want := build.Any(b.istioMutual(oc, nil))
			if got.GetTypeUrl() != want.GetTypeUrl() || !bytes.Equal(got.GetValue(), want.GetValue()) {
				t.Errorf("%s: assembled context differs from marshalling the whole message", oc.Name)
			}
			decoded, err := got.UnmarshalNew()
			if err != nil || !proto.Equal(decoded, b.istioMutual(oc, nil)) {
				t.Errorf("%s: assembled context decodes to %v (%v)", oc.Name, decoded, err)
			}
		})
		if n < 3 {
			t.Fatalf("only %d clusters to check", n)
		}
	}
}

func benchSidecarKeyIn(namespace string) proxy.Key {
	k := benchSidecarKey
	k.Namespace = namespace
	return k
}
