package kube

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

const (
	reviewsVS = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: shop
  labels: {team: shop}
spec:
  hosts: [web.shop.svc.cluster.local]
  http:
  - route:
    - destination: {host: web.shop.svc.cluster.local}
`
	// brokenVS passes the CRD's schema but not nave's validation.
	brokenVS = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: broken
  namespace: shop
spec:
  hosts: [web.shop.svc.cluster.local]
  http:
  - route:
    - destination: {host: web.shop.svc.cluster.local}
      weight: 50
    - destination: {host: db.shop.svc.cluster.local}
      weight: 40
`
)

// TestKubeSource runs sources against a real API server: what they
// publish first, how changes, namespace selection and invalid Istio
// objects show, and how an update storm is coalesced.
func TestKubeSource(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	c.Apply(t, repoFile(t, "deploy/spoke/istio-crds.yaml"))
	c.Apply(t, kubetest.GatewayAPICRDs(t)...)
	k := newClient(t, c)
	ctx := t.Context()

	k.namespace("shop", map[string]string{"mesh": "on", meshconfig.NetworkLabel: "net-ns"})
	k.namespace("other", map[string]string{"mesh": "off"})
	k.node("node-a", map[string]string{labelRegion: "r1", labelZone: "z1", labelSubzone: "s1", "unrelated": "x"})
	k.node("node-b", map[string]string{labelRegion: "r1", labelZone: "z2"})
	k.service(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"example.com/owner": "shop"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "api", Port: 9090, AppProtocol: ptr("grpc"), TargetPort: intstr.FromString("api")},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
				{Name: "metrics", Port: 9100},
			},
		},
	})
	k.service(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Name: "mongo", Port: 27017}}},
	})
	k.service(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
	})
	k.service(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hidden", Namespace: "other"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	k.pod("shop", "web-1", "node-a", "10.1.0.1", true, map[string]string{"app": "web", "version": "v1"})
	k.pod("shop", "web-2", "node-b", "10.1.0.2", true, map[string]string{"app": "web", meshconfig.NetworkLabel: "net-pod"})
	// web-3's istio-locality label wins over its node's topology (as in Istio).
	k.pod("shop", "web-3", "node-a", "10.1.0.3", true, map[string]string{"app": "web", meshconfig.LocalityLabel: "r9.z9.s9"})
	webPorts := map[string]int32{"http": 8080, "api": 9090}
	webSlice := sliceOf("shop", "web-abc", "web", webPorts,
		sliceEndpoint{ip: "10.1.0.1", pod: "web-1", node: "node-a", ready: true},
		sliceEndpoint{ip: "10.1.0.2", pod: "web-2", node: "node-b", ready: true},
		sliceEndpoint{ip: "10.1.0.3", pod: "web-3", node: "node-a", ready: true, terminating: true},
		sliceEndpoint{ip: "10.1.0.50", ready: true},
	)
	k.createSlice(webSlice)
	k.createSlice(sliceOf("other", "hidden-x", "hidden", map[string]int32{"http": 80}, sliceEndpoint{ip: "10.2.0.1", ready: true}))
	c.Apply(t, []byte(reviewsVS), []byte(brokenVS))

	src := runSource(t, c.Admin, Options{})
	selected := runSource(t, c.Admin, Options{NamespaceSelector: "mesh=on"})

	t.Run("initial publish is complete and normalized", func(t *testing.T) {
		src.waitPublished(t, "the initial publish", func([]*meshconfig.Object) bool { return true })
		if err := src.Ready(); err != nil {
			t.Errorf("Ready after the initial publish: %v", err)
		}
		// Everything existed before Run: the first publish holds it all.
		first := src.rec.first()
		for _, want := range []struct{ kind, key string }{
			{"Service", "shop/web"}, {"Service", "shop/db"}, {"Service", "shop/ext"}, {"Service", "other/hidden"},
			{"Workload", "shop/web-1"}, {"Workload", "shop/web-2"}, {"Workload", "shop/web-3"},
			{"Workload", "shop/web-abc-10-1-0-50"}, {"Workload", "other/hidden-x-10-2-0-1"},
			{"VirtualService", "shop/reviews"},
		} {
			if find(first, want.kind, want.key) == nil {
				t.Errorf("first publish lacks %s %s; has:%s", want.kind, want.key, keysOf(first))
			}
		}
		if o := find(first, "VirtualService", "shop/broken"); o != nil {
			t.Errorf("invalid VirtualService shop/broken was published")
		}
		for _, o := range first {
			if o.Version == "" || o.Version != o.ComputeVersion() || o.Origin != "kubernetes" {
				t.Errorf("%s %s: version %q (content %q), origin %q", o.Kind, o.Key(), o.Version, o.ComputeVersion(), o.Origin)
			}
			if err := meshconfig.Validate(o); err != nil {
				t.Errorf("published object invalid: %v", err)
			}
		}

		web := find(first, "Service", "shop/web")
		wantWeb := &meshconfigv1.Service{
			Hostname: "web.shop.svc.cluster.local",
			Ports: []*meshconfigv1.ServicePort{
				{Name: "http", Number: 80, Protocol: "HTTP", TargetPort: 8080},
				{Name: "api", Number: 9090, Protocol: "GRPC", TargetPortName: "api"},
				{Name: "metrics", Number: 9100, Protocol: "", TargetPort: 9100},
			},
			Selector: map[string]string{"app": "web"},
		}
		gotWeb := proto.Clone(web.Spec).(*meshconfigv1.Service)
		if len(gotWeb.GetAddresses()) != 1 || !strings.HasPrefix(gotWeb.GetAddresses()[0], "10.96.") {
			t.Errorf("web addresses %v, want one cluster IP in 10.96.0.0/16", gotWeb.GetAddresses())
		}
		gotWeb.Addresses = nil
		if !proto.Equal(gotWeb, wantWeb) {
			t.Errorf("web service:\n got %v\nwant %v", gotWeb, wantWeb)
		}
		if web.Labels["app"] != "web" || web.Annotations["example.com/owner"] != "shop" || web.CreationTime.IsZero() {
			t.Errorf("web envelope: labels %v annotations %v created %v", web.Labels, web.Annotations, web.CreationTime)
		}
		db := find(first, "Service", "shop/db").Spec.(*meshconfigv1.Service)
		if len(db.GetAddresses()) != 0 || len(db.GetPorts()) != 1 || db.GetPorts()[0].GetProtocol() != "Mongo" {
			t.Errorf("headless db service: %v", db)
		}
		ext := find(first, "Service", "shop/ext").Spec.(*meshconfigv1.Service)
		if ext.GetExternalName() != "db.example.com" || len(ext.GetAddresses()) != 0 {
			t.Errorf("ExternalName service: %v", ext)
		}

		wantWorkloads := map[string]*meshconfigv1.Workload{
			"shop/web-1": {Address: "10.1.0.1", Ports: map[string]uint32{"http": 8080, "api": 9090},
				ServiceAccount: "web-1-sa", Locality: &meshconfigv1.Locality{Region: "r1", Zone: "z1", Subzone: "s1"},
				Network: "net-ns", Health: meshconfigv1.Workload_READY, Services: []string{"web.shop.svc.cluster.local"}},
			"shop/web-2": {Address: "10.1.0.2", Ports: map[string]uint32{"http": 8080, "api": 9090},
				ServiceAccount: "web-2-sa", Locality: &meshconfigv1.Locality{Region: "r1", Zone: "z2"},
				Network: "net-pod", Health: meshconfigv1.Workload_READY, Services: []string{"web.shop.svc.cluster.local"}},
			"shop/web-3": {Address: "10.1.0.3", Ports: map[string]uint32{"http": 8080, "api": 9090},
				ServiceAccount: "web-3-sa", Locality: &meshconfigv1.Locality{Region: "r9", Zone: "z9", Subzone: "s9"},
				Network: "net-ns", Health: meshconfigv1.Workload_TERMINATING, Services: []string{"web.shop.svc.cluster.local"}},
			"shop/web-abc-10-1-0-50": {Address: "10.1.0.50", Ports: map[string]uint32{"http": 8080, "api": 9090},
				Network: "net-ns", Health: meshconfigv1.Workload_READY, Services: []string{"web.shop.svc.cluster.local"}},
		}
		for key, want := range wantWorkloads {
			o := find(first, "Workload", key)
			if o == nil {
				continue // reported above
			}
			if !proto.Equal(o.Spec, want) {
				t.Errorf("workload %s:\n got %v\nwant %v", key, o.Spec, want)
			}
		}
		// The pod's labels, including any the API server added (topology
		// labels copied from the node).
		pod, err := k.CoreV1().Pods("shop").Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l := find(first, "Workload", "shop/web-1").Labels; !maps.Equal(l, pod.Labels) || l["version"] != "v1" {
			t.Errorf("workload web-1 labels %v, want the pod's %v", l, pod.Labels)
		}

		vs := find(first, "VirtualService", "shop/reviews")
		if vs.Kind.TypeURL != "type.googleapis.com/istio.networking.v1alpha3.VirtualService" ||
			vs.Labels["team"] != "shop" || vs.CreationTime.IsZero() {
			t.Errorf("VirtualService envelope: %+v", vs)
		}
		if hosts := vs.Spec.(*networkingv1alpha3.VirtualService).GetHosts(); !slices.Equal(hosts, []string{"web.shop.svc.cluster.local"}) {
			t.Errorf("VirtualService hosts %v", hosts)
		}

		for _, ks := range src.Status() {
			if !ks.Synced || ks.State != StateSynced || ks.LastError != "" {
				t.Errorf("kind status %+v, want synced without error", ks)
			}
		}
		if n := src.kindStatus(t, "Service").Objects; n < 4 {
			t.Errorf("Service status counts %d objects, want at least 4", n)
		}
		if got := src.metric(t, "nave_spoke_kube_kinds_not_synced"); got != 0 {
			t.Errorf("kinds_not_synced = %v, want 0", got)
		}
		if got := src.metric(t, "nave_spoke_kube_objects", "kind", "VirtualService"); got != 1 {
			t.Errorf("objects{VirtualService} = %v, want 1", got)
		}
		if got := src.metric(t, "nave_spoke_kube_events_total", "kind", "Pod"); got < 3 {
			t.Errorf("events_total{Pod} = %v, want at least 3", got)
		}
	})

	t.Run("invalid VirtualService is skipped and reported", func(t *testing.T) {
		st := src.kindStatus(t, "VirtualService")
		if len(st.Invalid) != 1 {
			t.Fatalf("VirtualService status lists %d invalid objects, want 1: %+v", len(st.Invalid), st.Invalid)
		}
		inv := st.Invalid[0]
		if inv.Namespace != "shop" || inv.Name != "broken" || inv.Field != "spec.http[0].route" || !strings.Contains(inv.Reason, "weights sum to 90") {
			t.Errorf("invalid object %+v", inv)
		}
		if got := src.metric(t, "nave_spoke_kube_invalid_objects", "kind", "VirtualService"); got != 1 {
			t.Errorf("invalid_objects{VirtualService} = %v, want 1", got)
		}
		if logs := src.logs.String(); !strings.Contains(logs, "kubernetes object invalid") || !strings.Contains(logs, "name=broken") {
			t.Errorf("no log line for the invalid VirtualService")
		}
		// Fixing it publishes it.
		c.Apply(t, []byte(strings.Replace(brokenVS, "weight: 40", "weight: 50", 1)))
		src.waitPublished(t, "the fixed VirtualService", has("VirtualService", "shop/broken"))
		waitFor(t, "the status to drop the rejection", func() bool { return len(src.kindStatus(t, "VirtualService").Invalid) == 0 })
	})

	t.Run("namespace selector", func(t *testing.T) {
		objs := selected.waitPublished(t, "the selected sources's initial publish", has("Service", "shop/web"))
		for _, o := range objs {
			if o.Namespace != "shop" {
				t.Errorf("%s %s published, but its namespace is not selected", o.Kind, o.Key())
			}
		}
		// Relabeling namespaces re-evaluates the selection.
		relabel := func(ns, value string) {
			n, err := k.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n.Labels["mesh"] = value
			if _, err := k.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		relabel("other", "on")
		selected.waitPublished(t, "other/hidden once its namespace is selected",
			all(has("Service", "other/hidden"), has("Workload", "other/hidden-x-10-2-0-1")))
		relabel("other", "off")
		selected.waitPublished(t, "other/hidden gone once its namespace is deselected",
			all(hasNot("Service", "other/hidden"), hasNot("Workload", "other/hidden-x-10-2-0-1"), has("Service", "shop/web")))
	})

	t.Run("changes are reflected", func(t *testing.T) {
		// Scale up: a new ready pod joins the slice.
		before := src.waitPublished(t, "workload web-3", has("Workload", "shop/web-3"))
		k.pod("shop", "web-4", "node-b", "10.1.0.4", true, map[string]string{"app": "web"})
		webSlice.Endpoints = append(webSlice.Endpoints, sliceOf("shop", "", "", nil,
			sliceEndpoint{ip: "10.1.0.4", pod: "web-4", node: "node-b", ready: true}).Endpoints...)
		k.updateSlice(webSlice)
		objs := src.waitPublished(t, "workload web-4", has("Workload", "shop/web-4"))
		// What did not change is not made again (nor validated and hashed):
		// the build costs what changed.
		for _, key := range [][2]string{{"Workload", "shop/web-3"}, {"Service", "shop/web"}} {
			if a, b := find(before, key[0], key[1]), find(objs, key[0], key[1]); a == nil || a != b {
				t.Errorf("%s %s was made again though nothing it is made of changed", key[0], key[1])
			}
		}
		if h := find(objs, "Workload", "shop/web-4").Spec.(*meshconfigv1.Workload).GetHealth(); h != meshconfigv1.Workload_READY {
			t.Errorf("web-4 health %v, want READY", h)
		}

		// Scale down: web-2 leaves the slice; web-1 turns not ready.
		webSlice.Endpoints = slices.DeleteFunc(webSlice.Endpoints, func(e discoveryv1.Endpoint) bool { return e.Addresses[0] == "10.1.0.2" })
		webSlice.Endpoints[0].Conditions.Ready = ptr(false)
		k.updateSlice(webSlice)
		src.waitPublished(t, "web-2 gone and web-1 not ready", all(hasNot("Workload", "shop/web-2"), func(objs []*meshconfig.Object) bool {
			w := find(objs, "Workload", "shop/web-1")
			return w != nil && w.Spec.(*meshconfigv1.Workload).GetHealth() == meshconfigv1.Workload_NOT_READY
		}))

		// A pod's labels and a node's topology flow into the workload.
		pod, err := k.CoreV1().Pods("shop").Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Labels["version"] = "v2"
		if _, err := k.CoreV1().Pods("shop").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		node, err := k.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Labels[labelZone] = "z9"
		if _, err := k.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		src.waitPublished(t, "web-1 relabeled and relocated", func(objs []*meshconfig.Object) bool {
			w := find(objs, "Workload", "shop/web-1")
			return w != nil && w.Labels["version"] == "v2" && w.Spec.(*meshconfigv1.Workload).GetLocality().GetZone() == "z9"
		})

		// Deletes.
		if err := k.CoreV1().Services("shop").Delete(ctx, "ext", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := k.DiscoveryV1().EndpointSlices("other").Delete(ctx, "hidden-x", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := k.istio.NetworkingV1().VirtualServices("shop").Delete(ctx, "reviews", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		src.waitPublished(t, "deleted objects gone", all(hasNot("Service", "shop/ext"),
			hasNot("Workload", "other/hidden-x-10-2-0-1"), hasNot("VirtualService", "shop/reviews"), has("Service", "shop/web")))
	})

	t.Run("status-only updates publish nothing", func(t *testing.T) {
		before := src.rec.count()
		events := src.metric(t, "nave_spoke_kube_events_total", "kind", "VirtualService")
		builds := src.metric(t, "nave_spoke_kube_build_duration_seconds")
		vs, err := k.istio.NetworkingV1().VirtualServices("shop").Get(ctx, "broken", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vs.Status.ObservedGeneration = vs.Generation
		if _, err := k.istio.NetworkingV1().VirtualServices("shop").UpdateStatus(ctx, vs, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the status update event", func() bool {
			return src.metric(t, "nave_spoke_kube_events_total", "kind", "VirtualService") > events
		})
		// The event's debounced build (each build is observed once) is
		// where a publish would have been; a real change made after it
		// publishes after any such publish.
		waitFor(t, "the debounced build after the status update", func() bool {
			return src.metric(t, "nave_spoke_kube_build_duration_seconds") > builds
		})
		c.Apply(t, []byte(strings.ReplaceAll(reviewsVS, "name: reviews", "name: after-status")))
		src.waitPublished(t, "a VirtualService created after the status update", has("VirtualService", "shop/after-status"))
		if n := src.rec.count(); n != before+1 {
			t.Errorf("a status-only update then a new VirtualService published %d times, want once (the new VirtualService)", n-before)
		}
	})

	t.Run("update storm is coalesced", func(t *testing.T) {
		const pods = 100
		k.namespace("storm", nil)
		var eps []sliceEndpoint
		for i := range pods {
			ip := fmt.Sprintf("10.3.%d.%d", i/250, i%250+1)
			k.pod("storm", fmt.Sprintf("p-%d", i), "node-a", ip, true, map[string]string{"app": "storm", "rev": "0"})
			eps = append(eps, sliceEndpoint{ip: ip, pod: fmt.Sprintf("p-%d", i), node: "node-a", ready: true})
		}
		stormSlice := sliceOf("storm", "storm-1", "storm", map[string]int32{"http": 8080}, eps...)
		k.createSlice(stormSlice)
		src.waitPublished(t, "the storm's workloads", func(objs []*meshconfig.Object) bool {
			return countIn(objs, "Workload", "storm") == pods
		})

		// Every publish counted below happens after began.
		began := time.Now()
		before := src.rec.count()
		// 400 pod relabels (4 rounds of a rollout) and 100 slice updates,
		// from 20 workers at once.
		const rounds = 4
		jobs := make(chan func() error)
		var wg sync.WaitGroup
		var failed sync.Once
		for range 20 {
			wg.Go(func() {
				for job := range jobs {
					if err := job(); err != nil {
						failed.Do(func() { t.Errorf("storm update: %v", err) })
					}
				}
			})
		}
		for r := 1; r <= rounds; r++ {
			for i := range pods {
				jobs <- func() error {
					return k.relabelPod("storm", fmt.Sprintf("p-%d", i), "rev", fmt.Sprint(r))
				}
			}
		}
		wg.Go(func() {
			// The slice is one object: its updates go one after another.
			for i := range pods {
				stormSlice.Endpoints[i].Conditions.Ready = ptr(i%2 == 0)
				if err := k.replaceSlice(stormSlice); err != nil {
					failed.Do(func() { t.Errorf("storm slice update: %v", err) })
					return
				}
			}
		})
		close(jobs)
		wg.Wait()
		stormTook := time.Since(began)
		src.waitPublished(t, "the storm's final state", func(objs []*meshconfig.Object) bool {
			n := 0
			for _, o := range objs {
				if o.Kind.Kind != "Workload" || o.Namespace != "storm" || o.Labels["rev"] != fmt.Sprint(rounds) {
					continue
				}
				var i int
				fmt.Sscanf(o.Name, "p-%d", &i)
				want := meshconfigv1.Workload_NOT_READY
				if i%2 == 0 {
					want = meshconfigv1.Workload_READY
				}
				if o.Spec.(*meshconfigv1.Workload).GetHealth() == want {
					n++
				}
			}
			return n == pods
		})
		publishes := src.rec.count() - before
		window := time.Since(began)
		t.Logf("%d pod and %d slice updates in %v made %d publishes within %v", rounds*pods, pods, stormTook.Round(time.Millisecond),
			publishes, window.Round(time.Millisecond))
		// Coalesced: the debounce acts at most once per quiet period
		// (shared/debounce: TestTimerActsAtMostOncePerQuiet holds that for
		// any timing of events, and how few actions a storm makes), and
		// each action is one publish at most, plus one the loop may still
		// have to take at began. A quick storm makes a handful; a loaded
		// machine, which stretches the storm and the informers' delivery of
		// it over seconds, a few more — never more than this bound, which
		// counts the whole window in which the publishes were made (the
		// informers' lag included), not the storm's updates alone.
		limit := 2 + int(window/DefaultDebounce)
		if publishes > limit {
			t.Errorf("the storm made %d publishes within %v, want at most %d (one per debounce period)", publishes, window.Round(time.Millisecond), limit)
		}
	})
}

func countIn(objs []*meshconfig.Object, kind, namespace string) int {
	n := 0
	for _, o := range objs {
		if o.Kind.Kind == kind && o.Namespace == namespace {
			n++
		}
	}
	return n
}
