package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/meshconfig"
)

// seDoc is a ServiceEntry named name, in block style (one field a line, as
// editors write it), with an endpoint at each address.
func seDoc(name string, addresses ...string) string {
	doc := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: " + name + "\n  namespace: shop\n" +
		"spec:\n  hosts:\n  - " + name + ".shop.mesh\n  ports:\n  - number: 80\n    name: http\n    protocol: HTTP\n" +
		"  resolution: STATIC\n"
	if len(addresses) > 0 {
		doc += "  endpoints:\n"
	}
	for _, a := range addresses {
		doc += "  - address: " + a + "\n"
	}
	return doc
}

// endpointsOf lists the endpoint addresses of the ServiceEntry name in objs.
func endpointsOf(objs []*meshconfig.Object, name string) string {
	for _, o := range objs {
		if o.Kind.Kind == "ServiceEntry" && o.Name == name {
			var out []string
			for _, e := range o.Spec.(*networkingv1alpha3.ServiceEntry).GetEndpoints() {
				out = append(out, e.GetAddress())
			}
			return strings.Join(out, ",")
		}
	}
	return "(none)"
}

func decodeOne(t *testing.T, doc string) *meshconfig.Object {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(doc), "x.yaml")
	if len(errs) > 0 || len(objs) != 1 {
		t.Fatalf("decode: %d objects, errors %v", len(objs), errs)
	}
	return objs[0]
}

// TestShrinks: what counts as removing something, kind by kind
// (docs/decisions/035).
func TestShrinks(t *testing.T) {
	const vsHead = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: x, namespace: shop}\nspec:\n"
	const drHead = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x, namespace: shop}\nspec:\n  host: x\n"
	twoRoutes := vsHead + "  hosts: [x]\n  http:\n  - route: [{destination: {host: a}}]\n  - route: [{destination: {host: b}}]\n"
	twoSubsets := drHead + "  subsets:\n  - {name: v1, labels: {v: '1'}}\n  - {name: v2, labels: {v: '2', w: '2'}}\n"
	for _, c := range []struct {
		name, old, next string
		want            bool
	}{
		{"endpoint removed", seDoc("web", "127.0.0.11", "127.0.0.99"), seDoc("web", "127.0.0.11"), true},
		{"all endpoints removed", seDoc("web", "127.0.0.11"), seDoc("web"), true},
		{"endpoint added", seDoc("web", "127.0.0.11"), seDoc("web", "127.0.0.11", "127.0.0.99"), false},
		{"endpoint changed", seDoc("web", "127.0.0.11"), seDoc("web", "127.0.0.12"), false},
		{"unchanged", seDoc("web", "127.0.0.11"), seDoc("web", "127.0.0.11"), false},
		{"host removed", strings.Replace(seDoc("web"), "  - web.shop.mesh\n", "  - web.shop.mesh\n  - www.shop.mesh\n", 1), seDoc("web"), true},
		{"port removed", strings.Replace(seDoc("web"), "    protocol: HTTP\n", "    protocol: HTTP\n  - {number: 81, name: admin, protocol: HTTP}\n", 1), seDoc("web"), true},
		{"port field removed", seDoc("web"), strings.Replace(seDoc("web"), "    protocol: HTTP\n", "", 1), true},
		{"route removed", twoRoutes, vsHead + "  hosts: [x]\n  http:\n  - route: [{destination: {host: a}}]\n", true},
		{"route destination changed", twoRoutes, strings.Replace(twoRoutes, "host: b", "host: c", 1), false},
		{"route added", vsHead + "  hosts: [x]\n  http:\n  - route: [{destination: {host: a}}]\n", twoRoutes, false},
		{"subset removed", twoSubsets, drHead + "  subsets:\n  - {name: v1, labels: {v: '1'}}\n", true},
		{"subset label removed", twoSubsets, strings.Replace(twoSubsets, ", w: '2'}", "}", 1), true},
		{"traffic policy removed", drHead + "  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}\n", drHead, true},
		{"label removed", strings.Replace(drHead, "namespace: shop}", "namespace: shop, labels: {a: b}}", 1), drHead, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := shrinks(decodeOne(t, c.old), decodeOne(t, c.next)); got != c.want {
				t.Errorf("shrinks = %v, want %v", got, c.want)
			}
		})
	}
}

// TestCutSaveDoesNotShrink: a file rewritten in place and read cut at a
// line boundary (valid YAML, less content) removes nothing until it has
// stayed cut for a debounce window, wherever the cut falls; what it adds
// applies at once. The clock is moved by hand (reloader).
func TestCutSaveDoesNotShrink(t *testing.T) {
	whole := seDoc("web", "127.0.0.11", "127.0.0.99") + "---\n" + seDoc("api", "127.0.0.21")
	for _, c := range []struct {
		name, cut string
		// what the cut file holds once it is stable
		stable string
	}{
		{"before an endpoint", "  - address: 127.0.0.99\n", "web=127.0.0.11 api=(none)"},
		{"before endpoints", "  endpoints:\n", "web= api=(none)"},
		{"at a document boundary", "---\n", "web=127.0.0.11,127.0.0.99 api=(none)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			const all = "web=127.0.0.11,127.0.0.99 api=127.0.0.21"
			dir := t.TempDir()
			path := filepath.Join(dir, "se.yaml")
			write(t, path, whole)
			r := newReloader(t, dir)
			state := func() string {
				objs := r.src.Objects()
				return "web=" + endpointsOf(objs, "web") + " api=" + endpointsOf(objs, "api")
			}
			r.reload()
			if got := state(); got != all {
				t.Fatalf("first load: %s", got)
			}
			i := strings.Index(whole, c.cut)
			if i < 0 {
				t.Fatalf("no %q in the file", c.cut)
			}
			cut := whole[:i]
			if c.cut == "---\n" {
				cut += c.cut // the separator written, the next document not yet
			}

			rewrite(t, path, cut)
			r.reload()
			if got := state(); got != all {
				t.Fatalf("reading the cut file published %s, want %s", got, all)
			}
			r.reload()
			if got := state(); got != all {
				t.Fatalf("reading it again within the window published %s, want %s", got, all)
			}
			rewrite(t, path, whole)
			r.afterWindow()
			r.afterWindow()
			if got := state(); got != all {
				t.Fatalf("once whole: %s", got)
			}

			// An addition in a file that changed moments ago applies at once.
			more := strings.Replace(whole, "  - address: 127.0.0.99\n", "  - address: 127.0.0.99\n  - address: 127.0.0.100\n", 1)
			rewrite(t, path, more)
			r.reload()
			if got := endpointsOf(r.src.Objects(), "web"); got != "127.0.0.11,127.0.0.99,127.0.0.100" {
				t.Fatalf("after adding an endpoint: web=%s", got)
			}
			rewrite(t, path, whole)
			r.reload() // a shrink: held
			if got := endpointsOf(r.src.Objects(), "web"); got != "127.0.0.11,127.0.0.99,127.0.0.100" {
				t.Fatalf("removing the endpoint just added applied at once: web=%s", got)
			}
			r.afterWindow()
			if got := state(); got != all {
				t.Fatalf("once stable: %s", got)
			}

			// A cut that stays is an edit: it applies after a window.
			rewrite(t, path, cut)
			r.reload()
			if got := state(); got != all {
				t.Fatalf("cut again: %s", got)
			}
			r.afterWindow()
			if got := state(); got != c.stable {
				t.Fatalf("the file stayed cut for a window: %s, want %s", got, c.stable)
			}
		})
	}
}

// TestCutSaveUnderRun: the same through Run, its timers and real fsnotify.
// A save truncates the file and writes it up to an endpoint; once Run has
// read the cut file (it logs the deferred update), the save completes,
// adding an endpoint. No publication may lack an endpoint the file had,
// on either edge (on the leading one, the cut file is read at once).
func TestCutSaveUnderRun(t *testing.T) {
	for _, edge := range []debounce.Edge{debounce.Trailing, debounce.Leading} {
		t.Run(string(edge), func(t *testing.T) { cutSaveUnderRun(t, edge) })
	}
}

func cutSaveUnderRun(t *testing.T, edge debounce.Edge) {
	const deferred = "config update that removes content deferred"
	whole := seDoc("web", "127.0.0.11", "127.0.0.99")
	dir := t.TempDir()
	path := filepath.Join(dir, "se.yaml")
	write(t, path, whole)
	// The save completes within a window of the deferral, a long one.
	r := start(t, dir, Options{Debounce: time.Second, DebounceEdge: edge})
	r.waitFor(t, "both endpoints", func(objs []*meshconfig.Object) bool {
		return endpointsOf(objs, "web") == "127.0.0.11,127.0.0.99"
	})
	_, before := r.last()

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	i := strings.Index(whole, "  - address: 127.0.0.99\n")
	if _, err := f.WriteString(whole[:i]); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the deferred update", func() bool { return strings.Contains(r.logs.String(), deferred) })
	if _, err := f.WriteString(whole[i:] + "  - address: 127.0.0.100\n"); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the added endpoint", func(objs []*meshconfig.Object) bool {
		return endpointsOf(objs, "web") == "127.0.0.11,127.0.0.99,127.0.0.100"
	})

	r.mu.Lock()
	sets := r.published[before:]
	r.mu.Unlock()
	for i, objs := range sets {
		if got := endpointsOf(objs, "web"); !strings.HasPrefix(got, "127.0.0.11,127.0.0.99") {
			t.Fatalf("publish %d during the save: web=%s", i, got)
		}
	}
}
