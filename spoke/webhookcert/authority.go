package webhookcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Data keys of the CA Secret: one pair per CA generation,
// ca-<generation>.crt (PEM certificate) and ca-<generation>.key (PEM
// PKCS #8 key).
const (
	keyPrefix = "ca-"
	certExt   = ".crt"
	keyExt    = ".key"
)

// authority is one CA of the Secret. Immutable.
type authority struct {
	gen     int
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	keyPEM  []byte
}

// span is how long the CA is valid, backdating included.
func (a *authority) span() time.Duration { return a.cert.NotAfter.Sub(a.cert.NotBefore) }

// rotateAt is when the CA gets a successor: half way through its span.
func (a *authority) rotateAt() time.Time { return a.cert.NotBefore.Add(a.span() / 2) }

// signableAt is when the CA may sign while an older CA still can: a
// fifth of its span after it starts, long after every caBundle holds it.
func (a *authority) signableAt() time.Time { return a.cert.NotBefore.Add(a.span() / 5) }

// validAt reports whether the CA can vouch for certificates at now.
func (a *authority) validAt(now time.Time) bool { return now.Before(a.cert.NotAfter) }

// fingerprint is the first 16 hex digits of the certificate's SHA-256.
func (a *authority) fingerprint() string {
	sum := sha256.Sum256(a.cert.Raw)
	return hex.EncodeToString(sum[:8])
}

// backdate is how much earlier than now a certificate valid for v
// starts, for clocks a little behind the spoke's.
func backdate(v time.Duration) time.Duration { return min(time.Minute, v/10) }

// newAuthority makes CA generation gen, valid for validity from now.
func newAuthority(gen int, validity time.Duration, now time.Time) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"nave"}, CommonName: "nave-spoke webhook CA " + strconv.Itoa(gen)},
		NotBefore:             now.Add(-backdate(validity)),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{
		gen: gen, cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// parseAuthorities reads the CAs of a Secret's data, oldest generation
// first. An entry that does not parse, or whose key does not match its
// certificate, is left out and named in problems; so are data keys that
// are not ours. maxGen is the highest generation named by any key, parsed
// or not, so a new CA never reuses one.
func parseAuthorities(data map[string][]byte) (cas []*authority, maxGen int, problems []string) {
	gens := map[int]bool{}
	for k := range data {
		gen, ok := generationOf(k)
		if !ok {
			problems = append(problems, fmt.Sprintf("data key %q is not a CA's (want ca-<generation>.crt or .key)", k))
			continue
		}
		gens[gen] = true
		maxGen = max(maxGen, gen)
	}
	for _, gen := range slices.Sorted(maps.Keys(gens)) {
		a, err := parseAuthority(gen, data[keyPrefix+strconv.Itoa(gen)+certExt], data[keyPrefix+strconv.Itoa(gen)+keyExt])
		if err != nil {
			problems = append(problems, fmt.Sprintf("CA generation %d: %v", gen, err))
			continue
		}
		cas = append(cas, a)
	}
	slices.Sort(problems)
	return cas, maxGen, problems
}

// generationOf reads the generation of a data key, ca-<n>.crt or .key.
func generationOf(key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, certExt)
	if !ok {
		if num, ok = strings.CutSuffix(rest, keyExt); !ok {
			return 0, false
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || strconv.Itoa(n) != num {
		return 0, false
	}
	return n, true
}

func parseAuthority(gen int, certPEM, keyPEM []byte) (*authority, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	if !cert.IsCA || !cert.NotAfter.After(cert.NotBefore) {
		return nil, errors.New("the certificate is not a CA's")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, errors.New("no PEM PKCS #8 private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("the key cannot sign")
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("the key is not the certificate's")
	}
	return &authority{gen: gen, cert: cert, certPEM: certPEM, key: key, keyPEM: keyPEM}, nil
}

// secretData is the Secret's data holding cas.
func secretData(cas []*authority) map[string][]byte {
	data := make(map[string][]byte, 2*len(cas))
	for _, a := range cas {
		data[keyPrefix+strconv.Itoa(a.gen)+certExt] = a.certPEM
		data[keyPrefix+strconv.Itoa(a.gen)+keyExt] = a.keyPEM
	}
	return data
}
