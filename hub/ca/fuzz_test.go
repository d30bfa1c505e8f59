package ca

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzParseCSR: ParseCSR never panics; what it accepts is a CSR whose
// signature verifies and whose key is allowed; what it refuses is a
// RefusalError saying "csr: ". Seeds are in testdata/fuzz/FuzzParseCSR.
func FuzzParseCSR(f *testing.F) {
	f.Add(csrFor(f, uriA))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		csr, err := ParseCSR(data)
		if err != nil {
			if csr != nil {
				t.Fatal("a CSR along with an error")
			}
			r, ok := ReasonOf(err)
			if !ok || (r != ReasonInvalidCSR && r != ReasonKeyNotAllowed) {
				t.Fatalf("error %q: reason %q, %v; want invalid_csr or key_not_allowed", err, r, ok)
			}
			if !strings.HasPrefix(err.Error(), "csr: ") {
				t.Fatalf("error %q does not start with \"csr: \"", err)
			}
			return
		}
		if len(data) > MaxCSRSize {
			t.Fatalf("accepted %d bytes", len(data))
		}
		if err := csr.CheckSignature(); err != nil {
			t.Fatalf("accepted a CSR whose signature does not verify: %v", err)
		}
		if err := checkPublicKey(csr.PublicKey); err != nil {
			t.Fatalf("accepted a CSR with a key not allowed: %v", err)
		}
	})
}

// FuzzParseSPIFFEID: ParseSPIFFEID never panics, and what it accepts is a
// workload ID that prints back to its input, survives a trip through
// net/url (as a certificate's URI SAN does) and equals the ID WorkloadID
// builds from its parts. Seeds are in testdata/fuzz/FuzzParseSPIFFEID.
func FuzzParseSPIFFEID(f *testing.F) {
	f.Add(uriA)
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
		id, err := ParseSPIFFEID(s)
		if err != nil {
			if id != (ID{}) {
				t.Fatal("an ID along with an error")
			}
			return
		}
		if gerr != nil || general != id {
			t.Fatalf("ParseSPIFFEID accepted %q, ParseID gave %v, %v", s, general, gerr)
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
