package certreq

import (
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

// FuzzParseCSR: Parse never panics; what it accepts is a CSR whose
// signature verifies and whose key is allowed; what it refuses is a
// RefusalError saying "csr: ". Seeds are in testdata/fuzz/FuzzParseCSR.
func FuzzParseCSR(f *testing.F) {
	f.Add(certreqtest.For(f, uriA))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		csr, err := Parse(data)
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
		if len(data) > MaxSize {
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
