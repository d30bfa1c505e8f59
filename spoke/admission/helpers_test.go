package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/navemesh/nave/shared/meshconfig"
)

// selfSigned is a certificate for 127.0.0.1 and the pool that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook test"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// serve runs s on a loopback TLS listener until the test ends and returns
// its base URL and a client that trusts it.
func serve(t testing.TB, s *Server) (string, *http.Client) {
	t.Helper()
	cert, pool := selfSigned(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Serve(ctx, lis, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(client.CloseIdleConnections)
	return "https://" + lis.Addr().String(), client
}

// reviewOf is an AdmissionReview of op on the object given as YAML.
func reviewOf(t testing.TB, op admissionv1.Operation, objYAML string) []byte {
	t.Helper()
	var raw []byte
	if objYAML != "" {
		var err error
		raw, err = yaml.ToJSON([]byte(objYAML))
		if err != nil {
			t.Fatal(err)
		}
	}
	rv := admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		UID: "7c5e3c1a-0000-4000-8000-000000000001", Operation: op, Namespace: "shop", Name: "reviews",
		Kind:     metav1.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService"},
		Resource: metav1.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"},
		Object:   runtime.RawExtension{Raw: raw},
	}}
	rv.APIVersion, rv.Kind = ReviewAPIVersion, ReviewKind
	b, err := json.Marshal(&rv)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends body to url and returns the status and the decoded response
// (nil unless 200) or the error text.
func post(t testing.TB, client *http.Client, url, contentType string, body []byte) (int, *admissionv1.AdmissionResponse, string) {
	t.Helper()
	resp, err := client.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, buf.String()
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatalf("response %q: %v", buf.String(), err)
	}
	if out.APIVersion != ReviewAPIVersion || out.Kind != ReviewKind || out.Response == nil {
		t.Fatalf("response is not an AdmissionReview with a response: %s", buf.String())
	}
	return resp.StatusCode, out.Response, buf.String()
}

const validVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop, uid: 9d0b, resourceVersion: "12", creationTimestamp: "2026-01-02T03:04:05Z",
  managedFields: [{manager: kubectl, operation: Update}]}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 90
    - destination: {host: reviews, subset: v2}
      weight: 10
`

// invalidVS's weights sum to 90.
const invalidVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 80
    - destination: {host: reviews, subset: v2}
      weight: 10
`

const reviewsDR = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  subsets: [{name: v1, labels: {version: v1}}]
`

func decodeForFuzz(docs string) ([]*meshconfig.Object, error) {
	objs, errs := meshconfig.DecodeYAML([]byte(docs), "cluster.yaml")
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return objs, nil
}
