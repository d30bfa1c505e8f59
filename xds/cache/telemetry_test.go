package cache_test

import (
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// TestTelemetryChangeRegeneratesListenersOnly: a Telemetry change is a
// change of listeners alone (access logs, tracing, stats filters live in
// them); clusters, endpoints and routes are reused. A Telemetry selecting
// a workload keys its proxies apart from their neighbours', as the
// security policies' selectors do.
func TestTelemetryChangeRegeneratesListenersOnly(t *testing.T) {
	w := &world{t: t, objs: map[string]*meshconfig.Object{}}
	for _, o := range pushctxtest.EchoConfig(t, 80, 20) {
		w.objs[o.Kind.Kind+"/"+o.Name] = o
	}
	src := pushctxtest.NewSource()
	m, c := start(t, src, cache.Options{Verify: true})
	publish := publisher(t, src, m, c, w)
	selected := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", Labels: "app=client\ntier=gold", IPs: "10.9.0.1"}
	other := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", Labels: "app=client", IPs: "10.9.0.2"}
	st1 := publish()
	r1, o1 := st1.ForProxy(selected), st1.ForProxy(other)
	if r1 != o1 {
		t.Fatal("two sidecars no config tells apart got different generations")
	}

	w.put("Telemetry/gold", `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: gold, namespace: demo}
spec:
  selector: {matchLabels: {tier: gold}}
  accessLogging: [{providers: [{name: envoy}]}]
`)
	st2 := publish()
	if st2.State.Diff.Config || !st2.State.Diff.Telemetry {
		t.Fatalf("diff %+v, want a Telemetry change only", st2.State.Diff)
	}
	r2, o2 := st2.ForProxy(selected), st2.ForProxy(other)
	if r2 == o2 {
		t.Fatal("the Telemetry's selector does not tell the selected sidecar apart")
	}
	for _, typeURL := range []string{typeurl.Cluster, typeurl.Endpoint, typeurl.Route} {
		for name, p := range r1.Resources[typeURL] {
			if r2.Resources[typeURL][name] != p {
				t.Errorf("%s %s was regenerated for a Telemetry change", typeURL, name)
			}
		}
	}
	changed := 0
	for name, p := range r2.Resources[typeurl.Listener] {
		if r1.Resources[typeurl.Listener][name] != p {
			changed++
		}
	}
	if changed == 0 {
		t.Error("no listener of the selected sidecar changed: its access log is missing")
	}
	for name, p := range o2.Resources[typeurl.Listener] {
		if o1.Resources[typeurl.Listener][name].Hash != p.Hash {
			t.Errorf("listener %s of the sidecar the Telemetry does not select changed", name)
		}
	}
	if mm := c.Mismatches(); len(mm) > 0 {
		t.Errorf("mismatches: %v", mm)
	}
}
