package inject

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// benchServer is the webhook server with the injector over HTTPS on
// loopback (httptest's TLS server), and a client that keeps its
// connection.
func benchServer(tb testing.TB) (string, *http.Client) {
	srv := httptest.NewTLSServer(server(tb, newTestInjector(tb, nil)))
	tb.Cleanup(srv.Close)
	return srv.URL + Path, srv.Client()
}

// injectOnce posts body and checks that the answer is an injection.
func injectOnce(tb testing.TB, client *http.Client, url string, body []byte) {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		tb.Fatal(err)
	}
	var rv admissionv1.AdmissionReview
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &rv) != nil || rv.Response == nil || rv.Response.Patch == nil {
		tb.Fatalf("%d %.200s: want an injection", resp.StatusCode, out)
	}
}

// benchPods are the reviews measured: a bare pod, and a Deployment's pod
// with every capture annotation.
func benchPods(tb testing.TB) map[string][]byte {
	annotated, err := os.ReadFile("testdata/pods/sidecar-annotated.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	grpc, err := os.ReadFile("testdata/pods/grpc-agent.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return map[string][]byte{
		"sidecar-minimal":   reviewBody(tb, podRequest(tb, "shop", []byte(minimalPod))),
		"sidecar-annotated": reviewBody(tb, podRequest(tb, "shop", annotated)),
		"grpc-agent":        reviewBody(tb, podRequest(tb, "demo", grpc)),
	}
}

// BenchmarkInjectionReview is the injector's latency per review as the
// API server sees it: a pod's AdmissionReview POSTed over HTTPS (a kept
// connection) to the real Server, decoded, injected, its patch encoded,
// answered and decoded. It reports the median and 99th percentile of the
// round trips.
func BenchmarkInjectionReview(b *testing.B) {
	pods := benchPods(b)
	for _, name := range []string{"sidecar-minimal", "sidecar-annotated", "grpc-agent"} {
		b.Run(name, func(b *testing.B) {
			url, client := benchServer(b)
			body := pods[name]
			injectOnce(b, client, url, body) // the handshake
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				injectOnce(b, client, url, body)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// TestInjectionReviewBenchmarkOnce is BenchmarkInjectionReview's twin:
// one review of each pod through the same server.
func TestInjectionReviewBenchmarkOnce(t *testing.T) {
	url, client := benchServer(t)
	for _, body := range benchPods(t) {
		injectOnce(t, client, url, body)
	}
}
