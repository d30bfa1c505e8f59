package mesh

import (
	"reflect"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
)

func diffFixture() *Snapshot {
	svc := &Service{Hostname: "a.ns.svc.cluster.local", Namespace: "ns", Ports: []Port{{Name: "http", Number: 80, Protocol: "HTTP"}},
		Endpoints: []*Endpoint{{Address: "10.0.0.1", Ports: map[string]uint32{"http": 8080}, Labels: map[string]string{"v": "1"},
			Locality: Locality{Region: "r"}, Health: Healthy, Cluster: "c1", Source: "c1:WorkloadEntry ns/a"}},
		Sources: []string{"c1:ServiceEntry ns/a"}}
	return &Snapshot{Mesh: "m", Services: map[string]*Service{svc.Hostname: svc}}
}

// clone deep-copies the fixture's service so fields can be changed.
func cloneService(s *Service) *Service {
	c := *s
	c.Ports = append([]Port(nil), s.Ports...)
	c.Endpoints = nil
	for _, e := range s.Endpoints {
		ec := *e
		c.Endpoints = append(c.Endpoints, &ec)
	}
	return &c
}

// changeField sets field i of the struct v points to a different value.
func changeField(t *testing.T, v reflect.Value, i int) {
	t.Helper()
	f := v.Elem().Field(i)
	switch f.Kind() {
	case reflect.String:
		f.SetString(f.String() + "x")
	case reflect.Bool:
		f.SetBool(!f.Bool())
	case reflect.Uint32:
		f.SetUint(f.Uint() + 1)
	case reflect.Slice:
		elem := reflect.New(f.Type().Elem()).Elem()
		if elem.Kind() == reflect.Pointer {
			elem = reflect.New(f.Type().Elem().Elem())
		}
		f.Set(reflect.Append(reflect.MakeSlice(f.Type(), 0, 1), elem))
	case reflect.Map:
		m := reflect.MakeMap(f.Type())
		m.SetMapIndex(reflect.New(f.Type().Key()).Elem(), reflect.New(f.Type().Elem()).Elem())
		f.Set(m)
	case reflect.Struct:
		f.Field(0).SetString(f.Field(0).String() + "x")
	default:
		t.Fatalf("field %s of kind %s: teach the test (and DiffSnapshots) about it", v.Elem().Type().Field(i).Name, f.Kind())
	}
}

// TestDiffSeesEveryServiceAndEndpointField changes each field of Service
// and Endpoint in turn: a field DiffSnapshots ignores would make the hub
// reuse output generated from old data.
func TestDiffSeesEveryServiceAndEndpointField(t *testing.T) {
	prev := diffFixture()
	host := "a.ns.svc.cluster.local"
	st := reflect.TypeOf(Service{})
	for i := range st.NumField() {
		f := st.Field(i)
		if !f.IsExported() {
			continue
		}
		next := diffFixture()
		svc := cloneService(prev.Services[host])
		changeField(t, reflect.ValueOf(svc), i)
		if svc.Hostname != host { // a renamed service is a different map key
			next.Services = map[string]*Service{svc.Hostname: svc}
		} else {
			next.Services[host] = svc
		}
		d := DiffSnapshots(prev, next)
		if d.Unchanged() {
			t.Errorf("changing Service.%s is not seen", f.Name)
		}
		if f.Name != "Endpoints" && !d.Config {
			t.Errorf("changing Service.%s is not a config change", f.Name)
		}
	}
	et := reflect.TypeOf(Endpoint{})
	for i := range et.NumField() {
		f := et.Field(i)
		if !f.IsExported() {
			continue
		}
		next := diffFixture()
		svc := cloneService(prev.Services[host])
		changeField(t, reflect.ValueOf(svc.Endpoints[0]), i)
		next.Services[host] = svc
		d := DiffSnapshots(prev, next)
		if f.Name == "Stale" { // generators never read it (see its doc)
			if !d.Unchanged() {
				t.Errorf("changing Endpoint.Stale: diff %+v, want none (a spoke's flap regenerates nothing)", d)
			}
			continue
		}
		if d.Config || !d.Hosts[host] {
			t.Errorf("changing Endpoint.%s: diff %+v, want an endpoint change of %s", f.Name, d, host)
		}
		if !d.Addresses["10.0.0.1"] {
			t.Errorf("changing Endpoint.%s: addresses %v lack the endpoint's", f.Name, d.Addresses)
		}
	}
	if d := DiffSnapshots(prev, diffFixture()); !d.Unchanged() {
		t.Errorf("equal snapshots differ: %+v", d)
	}
	next := diffFixture()
	next.Telemetries = []*Config{{Object: &meshconfig.Object{Name: "mesh-default", Namespace: "istio-system"}}}
	if d := DiffSnapshots(prev, next); d.Config || !d.Telemetry || d.Unchanged() {
		t.Errorf("a new Telemetry: diff %+v, want a Telemetry change only", d)
	}
}

// TestDiffKnowsEverySnapshotField fails when Snapshot gains a field:
// DiffSnapshots must then compare it (or this list must say why not).
func TestDiffKnowsEverySnapshotField(t *testing.T) {
	covered := map[string]string{
		"Mesh": "compared", "Services": "compared", "VirtualServices": "compared", "AllVirtualServices": "compared",
		"DestinationRules": "compared", "Gateways": "compared", "Sidecars": "compared",
		"PeerAuthentications": "compared", "RequestAuthentications": "compared", "AuthorizationPolicies": "compared",
		"Telemetries":  "compared (Diff.Telemetry)",
		"EnvoyFilters": "compared",
		"TrustDomain":  "compared", "DomainSuffixes": "compared", "MeshConfig": "compared (by value)", "MeshNetworks": "compared (by value)",
		"NetworkGateways": "compared (by value; a change marks the hosts with endpoints on the networks concerned)",
		"Conflicts":       "derived from the config compared", "Problems": "derived from the config compared",
		"Clusters": "not read by generators", "GatewayAPIStatuses": "not read by generators (sent to the spokes over Watch)",
	}
	st := reflect.TypeOf(Snapshot{})
	for i := range st.NumField() {
		if f := st.Field(i); f.IsExported() && covered[f.Name] == "" {
			t.Errorf("Snapshot.%s is new: make DiffSnapshots compare it, then list it here", f.Name)
		}
	}
}

// TestDiffSeesSecurityConfigAndTrustDomain: a security policy added,
// replaced or removed, or a new trust domain, is a config change.
func TestDiffSeesSecurityConfigAndTrustDomain(t *testing.T) {
	pa := func(mode string) *Config {
		objs, errs := meshconfig.DecodeYAML([]byte("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\n"+
			"metadata: {name: default, namespace: ns}\nspec: {mtls: {mode: "+mode+"}}\n"), "pa.yaml")
		if len(errs) > 0 {
			t.Fatal(errs[0])
		}
		return &Config{Cluster: "c1", Object: objs[0]}
	}
	strict := pa("STRICT")
	base := func() *Snapshot {
		s := diffFixture()
		s.TrustDomain = DefaultTrustDomain
		s.PeerAuthentications = []*Config{strict}
		s.RequestAuthentications = []*Config{strict}
		s.AuthorizationPolicies = []*Config{strict}
		return s
	}
	if d := DiffSnapshots(base(), base()); !d.Unchanged() {
		t.Fatalf("equal snapshots differ: %+v", d)
	}
	for name, change := range map[string]func(*Snapshot){
		"PeerAuthentications replaced":     func(s *Snapshot) { s.PeerAuthentications = []*Config{pa("PERMISSIVE")} },
		"RequestAuthentications removed":   func(s *Snapshot) { s.RequestAuthentications = nil },
		"AuthorizationPolicies added":      func(s *Snapshot) { s.AuthorizationPolicies = append(s.AuthorizationPolicies, pa("DISABLE")) },
		"EnvoyFilters added":               func(s *Snapshot) { s.EnvoyFilters = []*Config{strict} },
		"TrustDomain":                      func(s *Snapshot) { s.TrustDomain = "example.org" },
		"a cluster's DomainSuffix":         func(s *Snapshot) { s.DomainSuffixes = map[string]string{"c1": "corp.example"} },
		"same object from another cluster": func(s *Snapshot) { s.PeerAuthentications = []*Config{{Cluster: "c2", Object: strict.Object}} },
	} {
		next := base()
		change(next)
		if d := DiffSnapshots(base(), next); !d.Config {
			t.Errorf("%s: not a config change (%+v)", name, d)
		}
	}
}

// TestDiffNamesRoutingChanges: when only DestinationRules and
// VirtualServices changed (with endpoints), the diff names the rules'
// hosts and the VirtualServices replaced; any other config change beside
// them names nothing (generation starts from scratch).
func TestDiffNamesRoutingChanges(t *testing.T) {
	cfg := func(kind, spec string) *Config {
		objs, errs := meshconfig.DecodeYAML([]byte("apiVersion: networking.istio.io/v1\nkind: "+kind+"\nmetadata: {name: a, namespace: ns}\n"+
			"spec: "+spec+"\n"), "cfg.yaml")
		if len(errs) > 0 {
			t.Fatal(errs[0])
		}
		return &Config{Cluster: "c1", Object: objs[0]}
	}
	const vs = "{hosts: [a.ns.svc.cluster.local], http: [{route: [{destination: {host: a.ns.svc.cluster.local}}]}]}"
	dr1, dr2 := cfg("DestinationRule", "{host: a.ns.svc.cluster.local}"), cfg("DestinationRule", "{host: a.ns.svc.cluster.local}")
	vs1, vs2 := cfg("VirtualService", vs), cfg("VirtualService", vs)
	base := func() *Snapshot {
		s := diffFixture()
		s.DestinationRules = map[string][]*Config{"a.ns.svc.cluster.local": {dr1}, "b.example": {dr1}}
		s.VirtualServices = map[string][]*Config{"a.ns.svc.cluster.local": {vs1}}
		s.AllVirtualServices = []*Config{vs1}
		return s
	}
	next := base()
	next.DestinationRules = map[string][]*Config{"a.ns.svc.cluster.local": {dr2}, "c.example": {dr1}}
	d := DiffSnapshots(base(), next)
	if !d.Config || len(d.Rules) != 3 || !d.Rules["a.ns.svc.cluster.local"] || !d.Rules["b.example"] || !d.Rules["c.example"] || d.Routes != nil {
		t.Errorf("a rule replaced, one moved from b to c: %+v, want Config and the three hosts", d)
	}
	next.VirtualServices = map[string][]*Config{"a.ns.svc.cluster.local": {vs2}}
	next.AllVirtualServices = []*Config{vs2}
	next.Services["a.ns.svc.cluster.local"].Endpoints[0] = &Endpoint{Address: "10.0.0.2", Cluster: "c1"}
	d = DiffSnapshots(base(), next)
	if !d.Config || len(d.Rules) != 3 || len(d.Routes) != 2 || d.Routes[0] != vs1 || d.Routes[1] != vs2 || !d.Hosts["a.ns.svc.cluster.local"] {
		t.Errorf("rules, a VirtualService and endpoints changed: %+v, want the rules' hosts, the VirtualService before and after, the endpoints' host", d)
	}
	next.Sidecars = []*Config{vs1}
	if d := DiffSnapshots(base(), next); !d.Config || d.Rules != nil || d.Routes != nil {
		t.Errorf("a Sidecar changed too: %+v, want Config alone", d)
	}
}
