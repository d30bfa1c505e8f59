package spiffeid

import (
	"net/url"
	"testing"
)

// FuzzParseSPIFFEID: ParseWorkloadID never panics, and what it accepts is a
// workload ID that prints back to its input, survives a trip through
// net/url (as a certificate's URI SAN does) and equals the ID WorkloadID
// builds from its parts. Seeds are in testdata/fuzz/FuzzParseSPIFFEID.
func FuzzParseSPIFFEID(f *testing.F) {
	f.Add("spiffe://m1.example/ns/a/sa/b")
	f.Add("spiffe://m1.example/nave/cluster/c1")
	f.Fuzz(func(t *testing.T, s string) {
		general, gerr := ParseID(s)
		if gerr == nil {
			if general.String() != s {
				t.Fatalf("ParseID(%q).String() = %q", s, general.String())
			}
			u, err := url.Parse(s)
			if err != nil || u.String() != s {
				t.Fatalf("ParseID accepted %q, which net/url reads as %v, %v", s, u, err)
			}
		}
		id, err := ParseWorkloadID(s)
		if err != nil {
			if id != (ID{}) {
				t.Fatal("an ID along with an error")
			}
			return
		}
		if gerr != nil || general != id {
			t.Fatalf("ParseWorkloadID accepted %q, ParseID gave %v, %v", s, general, gerr)
		}
		ns, sa, ok := id.Workload()
		if !ok {
			t.Fatalf("accepted %q, which is not a workload ID", s)
		}
		built, err := WorkloadID(id.TrustDomain, ns, sa)
		if err != nil || built != id {
			t.Fatalf("WorkloadID(%q, %q, %q) = %v, %v; want %v", id.TrustDomain, ns, sa, built, err, id)
		}
	})
}
