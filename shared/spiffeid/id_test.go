package spiffeid

import (
	"strings"
	"testing"
)

func TestParseSPIFFEIDAccepts(t *testing.T) {
	for _, tc := range []struct {
		in     string
		td     string
		ns, sa string
	}{
		{"spiffe://cluster.local/ns/default/sa/default", "cluster.local", "default", "default"},
		{"spiffe://m1.example/ns/a/sa/b", "m1.example", "a", "b"},
		{"spiffe://td/ns/kube-system/sa/my.service-account", "td", "kube-system", "my.service-account"},
		{"spiffe://a-b.c-d.e/ns/" + strings.Repeat("n", 63) + "/sa/s1", "a-b.c-d.e", strings.Repeat("n", 63), "s1"},
	} {
		id, err := ParseWorkloadID(tc.in)
		if err != nil {
			t.Errorf("ParseWorkloadID(%q): %v", tc.in, err)
			continue
		}
		ns, sa, ok := id.Workload()
		if id.TrustDomain != tc.td || !ok || ns != tc.ns || sa != tc.sa {
			t.Errorf("ParseWorkloadID(%q) = %+v (workload %q %q %v), want td %q ns %q sa %q", tc.in, id, ns, sa, ok, tc.td, tc.ns, tc.sa)
		}
		if id.String() != tc.in {
			t.Errorf("ParseWorkloadID(%q).String() = %q", tc.in, id.String())
		}
		built, err := WorkloadID(tc.td, tc.ns, tc.sa)
		if err != nil || built != id {
			t.Errorf("WorkloadID(%q, %q, %q) = %v, %v; want %v", tc.td, tc.ns, tc.sa, built, err, id)
		}
	}
}

func TestParseSPIFFEIDRefuses(t *testing.T) {
	for _, tc := range []struct {
		in, says string
	}{
		{"", "scheme"},
		{"http://m1.example/ns/a/sa/b", "scheme"},
		{"SPIFFE://m1.example/ns/a/sa/b", "lowercase"},
		{"spiffe:/m1.example/ns/a/sa/b", "scheme"},
		{"spiffe://m1.example/ns/a/sa/b?x=1", "query"},
		{"spiffe://m1.example/ns/a/sa/b#frag", "fragment"},
		{"spiffe://user@m1.example/ns/a/sa/b", "user info"},
		{"spiffe://m1.example:443/ns/a/sa/b", "port"},
		{"spiffe://m1.example/ns/a/sa/%62", "percent"},
		{"spiffe://M1.example/ns/a/sa/b", "uppercase"},
		{"spiffe://m1_example/ns/a/sa/b", `'_'`},
		{"spiffe://.m1.example/ns/a/sa/b", "empty"},
		{"spiffe://m1.example./ns/a/sa/b", "empty"},
		{"spiffe://m1..example/ns/a/sa/b", "empty"},
		{"spiffe://-m1.example/ns/a/sa/b", "start and end"},
		{"spiffe://" + strings.Repeat("a", 64) + ".example/ns/a/sa/b", "longer than 63"},
		{"spiffe:///ns/a/sa/b", "trust domain is empty"},
		{"spiffe://m1.example", "no path"},
		{"spiffe://m1.example/", "no path"},
		{"spiffe://m1.example/ns/a/sa/b/", "is empty"},
		{"spiffe://m1.example/ns/a/sa/b/c", "is not /ns/"},
		{"spiffe://m1.example/ns/a/sa", "is not /ns/"},
		{"spiffe://m1.example/ns//sa/b", "is empty"},
		{"spiffe://m1.example/ns/a/sa/..", "start and end"},
		{"spiffe://m1.example/ns/./sa/b", "start and end"},
		{"spiffe://m1.example/namespace/a/sa/b", "is not /ns/"},
		{"spiffe://m1.example/ns/a.b/sa/c", "namespace"},
		{"spiffe://m1.example/ns/A/sa/b", "uppercase"},
		{"spiffe://m1.example/ns/a/sa/b c", `' '`},
		{"spiffe://m1.example/ns/a/sa/b\x00", `'\x00'`},
		{"spiffe://m1.example/nave/cluster/c1", "is not /ns/"},
		{"spiffe://m1.example/ns/a/sa/" + strings.Repeat("b", 2100), "longer than 2048"},
	} {
		_, err := ParseWorkloadID(tc.in)
		if err == nil {
			t.Errorf("ParseWorkloadID(%q): no error, want one saying %q", tc.in, tc.says)
			continue
		}
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseWorkloadID(%q) = %q, want it to say %q", tc.in, err, tc.says)
		}
	}
}

func TestClusterID(t *testing.T) {
	id, err := ClusterID("m1.example", "east-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := id.String(), "spiffe://m1.example/nave/cluster/east-1"; got != want {
		t.Fatalf("ClusterID = %q, want %q", got, want)
	}
	parsed, err := ParseClusterID(id.String())
	if err != nil || parsed != id {
		t.Fatalf("ParseClusterID(%q) = %v, %v", id, parsed, err)
	}
	if c, ok := parsed.Cluster(); !ok || c != "east-1" {
		t.Fatalf("Cluster() = %q, %v", c, ok)
	}
	if _, _, ok := parsed.Workload(); ok {
		t.Fatal("a cluster ID is not a workload ID")
	}
	for _, bad := range []string{
		"spiffe://m1.example/ns/a/sa/b",
		"spiffe://m1.example/nave/cluster/east.1",
		"spiffe://m1.example/nave/cluster",
		"spiffe://m1.example/nave/cluster/a/b",
	} {
		if _, err := ParseClusterID(bad); err == nil {
			t.Errorf("ParseClusterID(%q): no error", bad)
		}
	}
	for _, tc := range [][2]string{{"M1", "c"}, {"m1.example", "c_1"}, {"m1.example", ""}} {
		if _, err := ClusterID(tc[0], tc[1]); err == nil {
			t.Errorf("ClusterID(%q, %q): no error", tc[0], tc[1])
		}
	}
	if _, err := WorkloadID("m1.example", "a.b", "c"); err == nil {
		t.Error("WorkloadID with a dotted namespace: no error")
	}
}

func TestParseIDGeneralForm(t *testing.T) {
	id, err := ParseID("spiffe://m1.example/nave/hub/replica-0")
	if err != nil {
		t.Fatal(err)
	}
	if id.Path != "/nave/hub/replica-0" || id.TrustDomain != "m1.example" {
		t.Fatalf("ParseID = %+v", id)
	}
	if _, _, ok := id.Workload(); ok {
		t.Fatal("not a workload ID")
	}
	if (ID{}).String() != "" || !(ID{}).IsZero() || id.IsZero() {
		t.Fatal("zero ID")
	}
}
