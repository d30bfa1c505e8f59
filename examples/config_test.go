package examples_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// object is one Kubernetes-style document of the demo config, its spec decoded strictly
// into the istio.io/api type of its kind.
type object struct {
	file      string
	kind      string
	name      string
	namespace string
	spec      proto.Message
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// loadConfig reads every YAML document under dir. Unknown fields anywhere in a spec fail
// the test, so a typo in the example cannot pass silently.
func loadConfig(t *testing.T, dir string) []object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no YAML files in %s (err %v)", dir, err)
	}
	var objs []object
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(raw), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			objs = append(objs, decodeDoc(t, file, i, []byte(doc)))
		}
	}
	return objs
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func decodeDoc(t *testing.T, file string, index int, doc []byte) object {
	t.Helper()
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("%s document %d: %v", file, index, err)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		t.Fatalf("%s document %d: %v", file, index, err)
	}
	if head.APIVersion != "networking.istio.io/v1" {
		t.Errorf("%s %s/%s: apiVersion %q, want networking.istio.io/v1", file, head.Kind, head.Metadata.Name, head.APIVersion)
	}
	var spec proto.Message
	switch head.Kind {
	case "ServiceEntry":
		spec = &networking.ServiceEntry{}
	case "WorkloadEntry":
		spec = &networking.WorkloadEntry{}
	case "DestinationRule":
		spec = &networking.DestinationRule{}
	case "VirtualService":
		spec = &networking.VirtualService{}
	default:
		t.Fatalf("%s document %d: unexpected kind %q", file, index, head.Kind)
	}
	if err := protojson.Unmarshal(head.Spec, spec); err != nil {
		t.Fatalf("%s %s/%s: spec: %v", file, head.Kind, head.Metadata.Name, err)
	}
	return object{file: filepath.Base(file), kind: head.Kind, name: head.Metadata.Name, namespace: head.Metadata.Namespace, spec: spec}
}

func only[T proto.Message](t *testing.T, objs []object, kind, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if o.kind == kind && o.name == name {
			found = append(found, o.spec.(T))
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one %s %q, found %d", kind, name, len(found))
	}
	return found[0]
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

const echoHost = "echo.demo.svc.cluster.local"

func TestDemoConfigIsConsistent(t *testing.T) {
	objs := loadConfig(t, "config")
	if len(objs) != 6 {
		t.Errorf("got %d objects, want 6 (1 ServiceEntry, 3 WorkloadEntries, 1 DestinationRule, 1 VirtualService)", len(objs))
	}
	for _, o := range objs {
		if o.namespace != "demo" {
			t.Errorf("%s %s/%s: namespace %q, want demo", o.file, o.kind, o.name, o.namespace)
		}
	}

	se := only[*networking.ServiceEntry](t, objs, "ServiceEntry", "echo")
	if !slices.Equal(se.GetHosts(), []string{echoHost}) {
		t.Errorf("ServiceEntry hosts %v", se.GetHosts())
	}
	if len(se.GetPorts()) != 1 || se.GetPorts()[0].GetNumber() != 7070 || se.GetPorts()[0].GetName() != "grpc" || se.GetPorts()[0].GetProtocol() != "GRPC" {
		t.Errorf("ServiceEntry ports %v, want [7070 grpc GRPC]", se.GetPorts())
	}
	if se.GetResolution().String() != "STATIC" || se.GetLocation().String() != "MESH_INTERNAL" {
		t.Errorf("ServiceEntry resolution %v location %v", se.GetResolution(), se.GetLocation())
	}

	// Each instance: the port the backend of that name listens on, and its zone.
	wantWorkloads := map[string]struct {
		port     uint32
		locality string
	}{
		"v1": {17071, "us-east/zone-a"},
		"v2": {17072, "us-east/zone-a"},
		"v3": {17073, "us-east/zone-b"},
	}
	workloads := map[string]*networking.WorkloadEntry{}
	for version, want := range wantWorkloads {
		we := only[*networking.WorkloadEntry](t, objs, "WorkloadEntry", "echo-"+version)
		workloads[version] = we
		if we.GetAddress() != "127.0.0.1" || we.GetPorts()["grpc"] != want.port || len(we.GetPorts()) != 1 {
			t.Errorf("WorkloadEntry echo-%s: address %q ports %v, want 127.0.0.1 grpc=%d", version, we.GetAddress(), we.GetPorts(), want.port)
		}
		if we.GetLocality() != want.locality {
			t.Errorf("WorkloadEntry echo-%s: locality %q, want %q", version, we.GetLocality(), want.locality)
		}
		if we.GetLabels()["version"] != version {
			t.Errorf("WorkloadEntry echo-%s: labels %v", version, we.GetLabels())
		}
		if !selects(se.GetWorkloadSelector().GetLabels(), we.GetLabels()) {
			t.Errorf("ServiceEntry selector %v does not select WorkloadEntry echo-%s %v", se.GetWorkloadSelector().GetLabels(), version, we.GetLabels())
		}
	}

	dr := only[*networking.DestinationRule](t, objs, "DestinationRule", "echo")
	if dr.GetHost() != echoHost {
		t.Errorf("DestinationRule host %q", dr.GetHost())
	}
	subsets := map[string]bool{}
	for _, s := range dr.GetSubsets() {
		subsets[s.GetName()] = true
		var matched []string
		for version, we := range workloads {
			if selects(s.GetLabels(), we.GetLabels()) {
				matched = append(matched, version)
			}
		}
		if !slices.Equal(matched, []string{s.GetName()}) {
			t.Errorf("subset %s selects %v, want exactly [%s]", s.GetName(), matched, s.GetName())
		}
	}
	if len(subsets) != 3 {
		t.Errorf("DestinationRule subsets %v, want v1 v2 v3", subsets)
	}

	vs := only[*networking.VirtualService](t, objs, "VirtualService", "echo")
	if !slices.Equal(vs.GetHosts(), []string{echoHost}) {
		t.Errorf("VirtualService hosts %v", vs.GetHosts())
	}
	routes := vs.GetHttp()
	if len(routes) != 2 {
		t.Fatalf("VirtualService has %d http routes, want 2", len(routes))
	}
	for _, r := range routes {
		var sum int32
		for _, d := range r.GetRoute() {
			if d.GetDestination().GetHost() != echoHost || !subsets[d.GetDestination().GetSubset()] {
				t.Errorf("route %s: destination %v is not a subset of %s", r.GetName(), d.GetDestination(), echoHost)
			}
			sum += d.GetWeight()
		}
		if len(r.GetRoute()) > 1 && sum != 100 {
			t.Errorf("route %s: weights add up to %d, want 100", r.GetName(), sum)
		}
	}

	beta := routes[0]
	if len(beta.GetMatch()) != 1 || beta.GetMatch()[0].GetHeaders()["x-user"].GetExact() != "beta" {
		t.Errorf("first route matches %v, want header x-user exact beta", beta.GetMatch())
	}
	if len(beta.GetRoute()) != 1 || beta.GetRoute()[0].GetDestination().GetSubset() != "v3" {
		t.Errorf("first route goes to %v, want subset v3", beta.GetRoute())
	}

	def := routes[1]
	if len(def.GetMatch()) != 0 {
		t.Errorf("default route has matches %v, want none", def.GetMatch())
	}
	split := map[string]int32{}
	for _, d := range def.GetRoute() {
		split[d.GetDestination().GetSubset()] = d.GetWeight()
	}
	// The weights themselves are the user's to edit (README walk-through); only the shape is fixed.
	if len(split) != 2 || split["v1"] == 0 && split["v2"] == 0 {
		t.Errorf("default route split %v, want a weighted split between v1 and v2", split)
	}
	if def.GetTimeout().AsDuration().String() != "2s" {
		t.Errorf("default route timeout %v, want 2s", def.GetTimeout())
	}
	if def.GetRetries().GetAttempts() != 2 || def.GetRetries().GetRetryOn() != "unavailable" {
		t.Errorf("default route retries %v, want 2 on unavailable", def.GetRetries())
	}
}
