package admission

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// clusterRules is a cluster's DestinationRules: n hosts with two subsets
// each, reviews among them.
func clusterRules(n int) string {
	var b strings.Builder
	b.WriteString(reviewsDR)
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc-%d, namespace: ns-%d}\n"+
			"spec: {host: svc-%d, subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]}\n", i, i%10, i)
	}
	return b.String()
}

// benchServer is a validation webhook over HTTPS on loopback, knowing
// 1,000 DestinationRules, and a client that keeps its connection.
func benchServer(tb testing.TB) (string, *http.Client) {
	s := NewServer(Options{})
	v := NewValidator("cluster.local")
	objs, err := decodeForFuzz(clusterRules(1000))
	if err != nil {
		tb.Fatal(err)
	}
	v.Update(objs)
	s.Handle(ValidatePath, "validation", v)
	return serve(tb, s)
}

// reviewOnce posts body and checks the answer's verdict.
func reviewOnce(tb testing.TB, client *http.Client, url string, body []byte, allowed bool) {
	code, resp, text := post(tb, client, url, "application/json", body)
	if code != http.StatusOK || resp.Allowed != allowed {
		tb.Fatalf("%d %s, want allowed=%t", code, text, allowed)
	}
}

// BenchmarkValidationReview is the validation webhook's latency per
// review as the API server sees it: an AdmissionReview POSTed over HTTPS
// (a kept connection) to the real Server, decoded, validated, warned
// about against 1,000 DestinationRules, answered and decoded. It reports
// the median and 99th percentile of the round trips.
func BenchmarkValidationReview(b *testing.B) {
	for _, c := range []struct {
		name    string
		obj     string
		allowed bool
	}{{"valid-with-warning", validVS, true}, {"invalid", invalidVS, false}} {
		b.Run(c.name, func(b *testing.B) {
			base, client := benchServer(b)
			body := reviewOf(b, admissionv1.Create, c.obj)
			reviewOnce(b, client, base+ValidatePath, body, c.allowed) // the handshake
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				reviewOnce(b, client, base+ValidatePath, body, c.allowed)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// TestValidationReviewBenchmarkOnce is BenchmarkValidationReview's twin:
// one review of each shape through the same server.
func TestValidationReviewBenchmarkOnce(t *testing.T) {
	base, client := benchServer(t)
	reviewOnce(t, client, base+ValidatePath, reviewOf(t, admissionv1.Create, validVS), true)
	reviewOnce(t, client, base+ValidatePath, reviewOf(t, admissionv1.Create, invalidVS), false)
}
