package mesh

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// entry is a ServiceEntry of hosts with spec fields set by fn, created at
// created (zero: unset).
func entry(t testing.TB, name string, created time.Time, fn func(*networking.ServiceEntry), hosts ...string) *meshconfig.Object {
	t.Helper()
	k, err := meshconfig.KindFor("networking.istio.io/v1", "ServiceEntry")
	if err != nil {
		t.Fatal(err)
	}
	se := &networking.ServiceEntry{Hosts: hosts, Resolution: networking.ServiceEntry_DNS, Location: networking.ServiceEntry_MESH_EXTERNAL,
		Ports: []*networking.ServicePort{{Number: 9000, Name: "tcp", Protocol: "TCP"}}}
	if fn != nil {
		fn(se)
	}
	o := &meshconfig.Object{Kind: k, Name: name, Namespace: "ext", Spec: se, CreationTime: created, Labels: map[string]string{}}
	o.Version = o.ComputeVersion()
	return o
}

func cluster(name string, objs ...*meshconfig.Object) ClusterInput {
	return ClusterInput{Name: name, Synced: true, Connected: true, Objects: objs}
}

// TestAutoAddressesGoWhereIstioAllocates: a ServiceEntry host without
// addresses gets one IPv4 address of 240.240.0.0/16 (fourth octet 1-254)
// and its IPv6 twin in 2001:2::/48; one with addresses, resolution NONE,
// a wildcard host, an entry labelled enable-autoallocate-ip=false, and a
// host that is also a Kubernetes Service get none.
func TestAutoAddressesGoWhereIstioAllocates(t *testing.T) {
	optOut := entry(t, "optout", time.Time{}, nil, "optout.example.com")
	optOut.Labels[AutoAllocateLabel] = "False"
	k, _ := meshconfig.KindFor("nave.io/v1", "Service")
	kube := &meshconfig.Object{Kind: k, Name: "reviews", Namespace: "shop", Spec: &meshconfigv1.Service{Hostname: "reviews.shop.svc.cluster.local"}}
	s := Build("m", []ClusterInput{cluster("c1",
		entry(t, "api", time.Time{}, nil, "api.example.com"),
		entry(t, "static", time.Time{}, func(se *networking.ServiceEntry) { se.Addresses = []string{"10.0.0.1"} }, "static.example.com"),
		entry(t, "none", time.Time{}, func(se *networking.ServiceEntry) { se.Resolution = networking.ServiceEntry_NONE }, "none.example.com"),
		entry(t, "wild", time.Time{}, nil, "*.wild.example.com"),
		entry(t, "decorator", time.Time{}, nil, "reviews.shop.svc.cluster.local"),
		optOut, kube,
	)})
	api := s.Services["api.example.com"].AutoAddresses
	if len(api) != 2 {
		t.Fatalf("api.example.com: auto addresses %v, want an IPv4 and an IPv6 one", api)
	}
	v4, v6 := netip.MustParseAddr(api[0]), netip.MustParseAddr(api[1])
	if !netip.MustParsePrefix(AutoAddressPrefixV4).Contains(v4) || v4.As4()[3] == 0 || v4.As4()[3] == 255 ||
		!netip.MustParsePrefix(AutoAddressPrefixV6).Contains(v6) {
		t.Errorf("api.example.com: %v outside the ranges (or a .0/.255 address)", api)
	}
	if b4, b16 := v4.As4(), v6.As16(); b16[14] != b4[2] || b16[15] != b4[3] {
		t.Errorf("IPv6 %s does not end with the IPv4 address's last two octets (%s)", v6, v4)
	}
	for _, h := range []string{"static.example.com", "none.example.com", "*.wild.example.com", "optout.example.com", "reviews.shop.svc.cluster.local"} {
		if got := s.Services[h].AutoAddresses; got != nil {
			t.Errorf("%s: auto addresses %v, want none", h, got)
		}
	}
	if !s.HasAutoAddresses() {
		t.Error("HasAutoAddresses is false")
	}
}

// hosts returns n ServiceEntries, one host each, created a second apart
// in the order given.
func hosts(t testing.TB, base time.Time, names ...string) []*meshconfig.Object {
	var out []*meshconfig.Object
	for i, n := range names {
		out = append(out, entry(t, strings.ReplaceAll(n, ".", "-"), base.Add(time.Duration(i)*time.Second), nil, n))
	}
	return out
}

func addresses(s *Snapshot) map[string]string {
	out := map[string]string{}
	for h, svc := range s.Services {
		if len(svc.AutoAddresses) > 0 {
			out[h] = svc.AutoAddresses[0]
		}
	}
	return out
}

// TestAutoAddressesAreStable: two builders given the same input in any
// order (objects and clusters shuffled, as two hub replicas may see it)
// allocate the same addresses, unique; a rebuild, an incremental one and
// a newer host added leave every existing host where it was.
func TestAutoAddressesAreStable(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var names []string
	for i := range 2000 {
		names = append(names, fmt.Sprintf("h%d.example.com", i))
	}
	objs := hosts(t, base, names...)
	var a Builder
	first := addresses(a.Build("m", []ClusterInput{cluster("c1", objs[:1000]...), cluster("c2", objs[1000:]...)}))
	if len(first) != len(names) {
		t.Fatalf("%d hosts have addresses, want %d", len(first), len(names))
	}
	seen := map[string]string{}
	for h, addr := range first {
		if other, dup := seen[addr]; dup {
			t.Fatalf("%s and %s both have %s", h, other, addr)
		}
		seen[addr] = h
	}

	shuffled := append([]*meshconfig.Object(nil), objs...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	var b Builder
	other := addresses(b.Build("m", []ClusterInput{cluster("c2", shuffled[1000:]...), cluster("c1", shuffled[:1000]...)}))
	for h, addr := range first {
		if other[h] != addr {
			t.Errorf("%s: %s from one builder, %s from another", h, addr, other[h])
		}
	}

	again := addresses(a.Build("m", []ClusterInput{cluster("c1", objs[:1000]...), cluster("c2", objs[1000:]...)}))
	newer := entry(t, "newer", base.Add(time.Hour), nil, "newer.example.com")
	added := addresses(a.Build("m", []ClusterInput{cluster("c1", append(objs[:1000:1000], newer)...), cluster("c2", objs[1000:]...)}))
	for h, addr := range first {
		if again[h] != addr || added[h] != addr {
			t.Errorf("%s: %s, then %s rebuilt, %s with a newer host", h, addr, again[h], added[h])
		}
	}
	if added["newer.example.com"] == "" {
		t.Error("the newer host has no address")
	}
}

// collidingHosts returns two host names whose addresses collide.
func collidingHosts(t *testing.T) (string, string) {
	bySlot := map[uint64]string{}
	for i := 0; ; i++ {
		h := fmt.Sprintf("c%d.example.com", i)
		slot := autoHash(h) % autoSlots
		if o, ok := bySlot[slot]; ok {
			return o, h
		}
		bySlot[slot] = h
		if i > 1_000_000 {
			t.Fatal("no collision found")
		}
	}
}

// TestAutoAddressCollision: of two hosts that hash to the same address,
// the older keeps it and the younger gets another, whatever their names
// and the order they are built in; once the older goes, the younger takes
// its preferred address.
func TestAutoAddressCollision(t *testing.T) {
	x, y := collidingHosts(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, order := range [][2]string{{x, y}, {y, x}} {
		older, younger := order[0], order[1]
		objs := hosts(t, base, older, younger)
		for _, in := range [][]*meshconfig.Object{objs, {objs[1], objs[0]}} {
			got := addresses(Build("m", []ClusterInput{cluster("c1", in...)}))
			if got[older] != autoAddresses(autoPreferred(older))[0] || got[younger] == got[older] || got[younger] == "" {
				t.Errorf("older %s: %s (preferred %s), younger %s: %s", older, got[older], autoAddresses(autoPreferred(older))[0], younger, got[younger])
			}
		}
		alone := addresses(Build("m", []ClusterInput{cluster("c1", objs[1])}))
		if alone[younger] != autoAddresses(autoPreferred(younger))[0] {
			t.Errorf("%s alone: %s, want its preferred %s", younger, alone[younger], autoAddresses(autoPreferred(younger))[0])
		}
	}
}

// TestAutoAddressesRunOut: once every address is taken, the newest hosts
// get none, each reported; the older ones keep theirs.
func TestAutoAddressesRunOut(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := Build("m", []ClusterInput{cluster("c1", hosts(t, base, "a.example.com", "b.example.com", "c.example.com", "d.example.com", "e.example.com")...)})
	s.Problems = nil
	s.allocate(3)
	for i, h := range []string{"a.example.com", "b.example.com", "c.example.com", "d.example.com", "e.example.com"} {
		got := s.Services[h].AutoAddresses
		if (i < 3) != (len(got) == 2) {
			t.Errorf("%s (the %d. oldest): %v", h, i+1, got)
		}
		if i < 3 {
			if n := s.Services[h].auto.slot - 1; n < 0 || n >= 3 {
				t.Errorf("%s: slot %d outside the 3 available", h, n)
			}
		}
	}
	if len(s.Problems) != 2 || !strings.Contains(s.Problems[0].Reason, "d.example.com") || !strings.Contains(s.Problems[1].Reason, "e.example.com") ||
		s.Problems[0].Resource != "c1:ServiceEntry ext/d-example-com" || s.Problems[0].Field != "spec.addresses" {
		t.Errorf("problems %+v; want d and e reported", s.Problems)
	}
}
