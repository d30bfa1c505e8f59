package certreq

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

const uriA = "spiffe://m1.example/ns/a/sa/b"

func TestParseCSRAcceptsAllowedKeys(t *testing.T) {
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]crypto.Signer{"P-256": certreqtest.ECKey(t), "P-384": p384, "RSA-2048": rsa2048, "Ed25519": ed} {
		csr, err := Parse(certreqtest.New(t, key, certreqtest.Template{URIs: []string{uriA}}))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(csr.URIs) != 1 || csr.URIs[0].String() != uriA {
			t.Errorf("%s: URIs %v", name, csr.URIs)
		}
	}
	// White space around the one block is fine.
	if _, err := Parse(append([]byte("\n  \n"), append(certreqtest.For(t, uriA), "\n\n"...)...)); err != nil {
		t.Errorf("surrounding white space: %v", err)
	}
}

func TestParseCSRRefuses(t *testing.T) {
	good := certreqtest.For(t, uriA)
	block, _ := pem.Decode(good)

	tampered := bytes.Clone(block.Bytes)
	tampered[len(tampered)-1] ^= 0x01 // last byte of the signature
	tamperedSubject := bytes.Clone(block.Bytes)
	i := bytes.Index(tamperedSubject, []byte("ignored"))
	tamperedSubject[i] = 'I' // the signed content, not the signature

	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	oversized := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: bytes.Repeat([]byte{0x30}, MaxSize)})

	for _, tc := range []struct {
		name   string
		in     []byte
		reason Reason
		says   string
	}{
		{"empty", nil, ReasonInvalidCSR, "empty"},
		{"garbage", []byte("\x00\x01garbage\xff"), ReasonInvalidCSR, "does not start with a PEM block"},
		{"raw DER", block.Bytes, ReasonInvalidCSR, "does not start with a PEM block"},
		{"oversized", oversized, ReasonInvalidCSR, "larger than the 65536 allowed"},
		{"two CSR blocks", concat(good, good), ReasonInvalidCSR, "second PEM block"},
		{"CSR then key", concat(good, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})), ReasonInvalidCSR, `second PEM block ("PRIVATE KEY")`},
		{"trailing text", concat(good, []byte("junk")), ReasonInvalidCSR, "bytes after its PEM block"},
		{"leading text", concat([]byte("junk\n"), good), ReasonInvalidCSR, "does not start with a PEM block"},
		{"certificate block", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}), ReasonInvalidCSR, `"CERTIFICATE", want "CERTIFICATE REQUEST"`},
		{"new certificate request", pem.EncodeToMemory(&pem.Block{Type: "NEW CERTIFICATE REQUEST", Bytes: block.Bytes}), ReasonInvalidCSR, "want \"CERTIFICATE REQUEST\""},
		{"headers", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Headers: map[string]string{"X": "y"}, Bytes: block.Bytes}), ReasonInvalidCSR, "headers"},
		{"truncated PEM", good[:len(good)-30], ReasonInvalidCSR, "not valid PEM"},
		{"not DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("hello")}), ReasonInvalidCSR, "not a valid PKCS #10 request"},
		{"DER with trailing bytes", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: append(bytes.Clone(block.Bytes), 0)}), ReasonInvalidCSR, "not a valid PKCS #10 request"},
		{"tampered signature", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered}), ReasonInvalidCSR, "signature does not verify"},
		{"tampered content", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tamperedSubject}), ReasonInvalidCSR, "signature does not verify"},
		{"RSA-1024", certreqtest.New(t, rsa1024, certreqtest.Template{URIs: []string{uriA}}), ReasonKeyNotAllowed, "RSA key of 1024 bits is not allowed"},
		{"P-521", certreqtest.New(t, p521, certreqtest.Template{URIs: []string{uriA}}), ReasonKeyNotAllowed, "curve P-521 is not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			csr, err := Parse(tc.in)
			if csr != nil {
				t.Error("returned a CSR along with the refusal")
			}
			wantRefusal(t, err, tc.reason, "csr: ", tc.says)
		})
	}
}

// TestParseCSRSizeCheckedFirst: input over the limit is refused by its
// size, even when it is not PEM at all, so nothing large is ever parsed.
func TestParseCSRSizeCheckedFirst(t *testing.T) {
	_, err := Parse(bytes.Repeat([]byte("x"), MaxSize+1))
	wantRefusal(t, err, ReasonInvalidCSR, "65537 bytes")
	if strings.Contains(err.Error(), "PEM") {
		t.Errorf("error %q looked at the content", err)
	}
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// wantRefusal asserts that err is a RefusalError of reason whose message
// contains every one of parts.
func wantRefusal(t testing.TB, err error, reason Reason, parts ...string) {
	t.Helper()
	got, ok := ReasonOf(err)
	if !ok {
		t.Fatalf("error %v is not a refusal, want reason %s", err, reason)
	}
	if got != reason {
		t.Errorf("reason %s, want %s (error: %v)", got, reason, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}
