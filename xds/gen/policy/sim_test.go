package policy_test

import (
	"testing"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// The *_sim_test.go tests run policies through Envoy generation (the
// gen façade) and walk the result with sim: what a sidecar or gateway
// accepts, refuses or originates, as Envoy would. They run against
// httpbinKey's sidecar unless they say otherwise.

var httpbinKey = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "foo", Labels: "app=httpbin\nsecurity.istio.io/tlsMode=istio", IPs: "10.0.0.5"}

// Identities of callers.
const (
	sleepBar = "spiffe://cluster.local/ns/bar/sa/sleep"
	otherBar = "spiffe://cluster.local/ns/bar/sa/other"
	opsAny   = "spiffe://cluster.local/ns/ops/sa/tool"
	foreign  = "spiffe://other.example/ns/bar/sa/sleep"
)

// secOut generates httpbin's sidecar config for objs, checks every
// resource and every typed config inside listeners validates, and returns
// it with a simulator.
func secOut(t *testing.T, objs []*meshconfig.Object) (*gen.Output, *envoysim.Sim) {
	t.Helper()
	snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
	out := gen.Envoy(snap, httpbinKey)
	gentest.ValidateDeep(t, out)
	return out, envoysim.New(out.Resources)
}

// mtls is a connection from a mesh workload with identity peer.
func mtls(req envoysim.Request, peer string) envoysim.Request {
	req.PeerCert, req.ALPN = peer, []string{"istio"}
	return req
}

func inHTTP(method, path string) envoysim.Request {
	return envoysim.Request{Inbound: true, IP: "10.0.0.5", Port: 80, Authority: "httpbin.foo:8000", Method: method, Path: path, SourceIP: "10.1.1.1"}
}

func inTCP(port uint32, source string) envoysim.Request {
	return envoysim.Request{Inbound: true, IP: "10.0.0.5", Port: port, SourceIP: source}
}
