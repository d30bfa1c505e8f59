package routes_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// retryMesh: reviews with three endpoints, one route per retry setting
// (selected by path), and a subset that hashes.
const retryMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  addresses: [10.96.0.10]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
  - {address: 10.1.0.1, labels: {version: v1}}
  - {address: 10.1.0.2, labels: {version: v2}}
  - {address: 10.1.0.3, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews.shop.svc.cluster.local
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}, trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /custom}}]
    route: [{destination: {host: reviews, subset: v1}}]
    retries: {attempts: 3, retryOn: 5xx, backoff: 100ms}
  - match: [{uri: {prefix: /same}}]
    route: [{destination: {host: reviews, subset: v1}}]
    retries: {attempts: 3, retryIgnorePreviousHosts: false}
  - match: [{uri: {prefix: /hashed-default}}]
    route: [{destination: {host: reviews, subset: v2}}]
  - match: [{uri: {prefix: /hashed-set}}]
    route: [{destination: {host: reviews, subset: v2}}]
    retries: {attempts: 2}
  - match: [{uri: {prefix: /hashed-avoid}}]
    route: [{destination: {host: reviews, subset: v2}}]
    retries: {attempts: 2, retryIgnorePreviousHosts: true}
  - route: [{destination: {host: reviews, subset: v1}}]
`

var shopSidecar = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=productpage", IPs: "10.0.0.9"}

// TestRetrySemantics walks the routes with the simulator: which hosts a
// request that keeps failing is tried on (the load balancer offering
// the same host first), and the back-off between retries.
func TestRetrySemantics(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": retryMesh})
	out := gen.Envoy(snap, shopSidecar)
	gentest.ValidateAll(t, out)
	s := envoysim.New(out.Resources)
	// The load balancer keeps offering 10.1.0.1 before the others.
	picks := []string{"a", "a", "a", "b", "c"}
	for _, tc := range []struct {
		path      string
		hosts     []string // nil: no retries
		base, max time.Duration
	}{
		// Istio's default policy: 2 retries, each avoiding the hosts tried.
		{"/", []string{"a", "b", "c"}, 25 * time.Millisecond, 250 * time.Millisecond},
		{"/custom", []string{"a", "b", "c", "c"}, 100 * time.Millisecond, time.Second},
		{"/same", []string{"a", "a", "a", "b"}, 25 * time.Millisecond, 250 * time.Millisecond},
		// A route that hashes retries on the hashed host, unless told not to.
		{"/hashed-default", []string{"a", "a", "a"}, 25 * time.Millisecond, 250 * time.Millisecond},
		{"/hashed-set", []string{"a", "a", "a"}, 25 * time.Millisecond, 250 * time.Millisecond},
		{"/hashed-avoid", []string{"a", "b", "c"}, 25 * time.Millisecond, 250 * time.Millisecond},
	} {
		r := s.Do(envoysim.Request{IP: "10.96.0.10", Port: 9080, Authority: "reviews:9080", Path: tc.path, Method: "GET"})
		if r.Err != nil {
			t.Errorf("%s: %v", tc.path, r.Err)
			continue
		}
		rt, err := envoysim.RetriesOf(r.Retry)
		if err != nil {
			t.Errorf("%s: %v", tc.path, err)
			continue
		}
		if got := rt.Hosts(picks); !slices.Equal(got, tc.hosts) {
			t.Errorf("%s: attempts go to %v, want %v (policy %v)", tc.path, got, tc.hosts, r.Retry)
		}
		if rt.BaseInterval != tc.base || rt.MaxInterval != tc.max {
			t.Errorf("%s: back-off %v..%v, want %v..%v", tc.path, rt.BaseInterval, rt.MaxInterval, tc.base, tc.max)
		}
	}

	// Without a VirtualService, the default route hashes as the
	// DestinationRule says (as in Istio) and its retries stay on the
	// hashed host.
	hashed := gentest.Snapshot(t, map[string]string{"c1": `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  addresses: [10.96.0.11]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.1.1}, {address: 10.1.1.2}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings, namespace: shop}
spec:
  host: ratings.shop.svc.cluster.local
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
`})
	r := envoysim.New(gen.Envoy(hashed, shopSidecar).Resources).Do(envoysim.Request{IP: "10.96.0.11", Port: 9080, Authority: "ratings:9080", Path: "/", Method: "GET"})
	rt, err := envoysim.RetriesOf(r.Retry)
	if r.Err != nil || err != nil || len(r.Hash) != 1 || r.Hash[0].GetHeader().GetHeaderName() != "x-user" {
		t.Errorf("default route: hash %v (%v, %v)", r.Hash, r.Err, err)
	} else if got := rt.Hosts(picks); !slices.Equal(got, []string{"a", "a", "a"}) {
		t.Errorf("default route with a hash: attempts go to %v", got)
	}
}

// TestProxylessRetries: grpc-go reads retry_back_off (gRFC A44) and no
// host predicate, so retryIgnorePreviousHosts: true is reported.
func TestProxylessRetries(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": retryMesh + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  ports: [{number: 9080, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.1.1.1}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  http:
  - route: [{destination: {host: reviews.shop.svc.cluster.local}}]
    retries: {attempts: 2, retryOn: "unavailable,5xx", perTryTimeout: 1s, retryRemoteLocalities: true, backoff: 50ms, retryIgnorePreviousHosts: true}
`})
	out := gen.GRPC(snap)
	gentest.ValidateAll(t, out)
	policies := map[string]*routev3.RetryPolicy{}
	for _, res := range out.Resources[typeurl.Route] {
		for _, vh := range res.Message.(*routev3.RouteConfiguration).GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				policies[vh.GetName()+" "+r.GetMatch().GetPrefix()] = r.GetRoute().GetRetryPolicy()
			}
		}
	}
	var custom, ratings *routev3.RetryPolicy
	for name, p := range policies {
		switch {
		case strings.HasPrefix(name, "reviews") && strings.HasSuffix(name, " /custom"):
			custom = p
		case strings.HasPrefix(name, "ratings"):
			ratings = p
		}
	}
	if custom.GetRetryBackOff().GetBaseInterval().AsDuration() != 100*time.Millisecond || custom.GetNumRetries().GetValue() != 3 {
		t.Errorf("reviews /custom retry policy %v (of %v), want 3 retries with a 100ms back-off", custom, policies)
	}
	if ratings.GetRetryBackOff().GetBaseInterval().AsDuration() != 50*time.Millisecond || len(ratings.GetRetryHostPredicate()) != 0 {
		t.Errorf("ratings retry policy %v, want a 50ms back-off and no host predicate", ratings)
	}
	wantProblem(t, out.Problems, "spec.http[0].retries.retryIgnorePreviousHosts", "no retry host predicate")
	wantProblem(t, out.Problems, "spec.http[0].retries.retryRemoteLocalities", "no retry priorities")
	wantProblem(t, out.Problems, "spec.http[0].retries.perTryTimeout", "no per-try timeout")
	wantProblem(t, out.Problems, "spec.http[0].retries.retryOn", "5xx ignored")
	wantProblem(t, out.Problems, "spec.http[0].retries.retryOn", "none is listed, so they do not retry") // reviews /custom: 5xx
}

func wantProblem(t *testing.T, ps []mesh.Problem, field, reason string) {
	t.Helper()
	for _, p := range ps {
		if p.Field == field && strings.Contains(p.Reason, reason) {
			return
		}
	}
	t.Errorf("no problem %s (%q) in %v", field, reason, ps)
}
