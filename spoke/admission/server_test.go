package admission

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/navemesh/nave/internal/testwait"
)

func validationServer(t *testing.T, opts Options) (*Server, string, *http.Client) {
	t.Helper()
	s := NewServer(opts)
	s.Handle(ValidatePath, "validation", loadedValidator(t, reviewsDR))
	base, client := serve(t, s)
	return s, base, client
}

// TestServerAnswersReviews sends a denied and an admitted review over
// HTTPS: the response is an AdmissionReview v1 with the request's uid.
func TestServerAnswersReviews(t *testing.T) {
	s, base, client := validationServer(t, Options{Registerer: prometheus.NewRegistry()})
	code, resp, body := post(t, client, base+ValidatePath, "application/json", reviewOf(t, admissionv1.Create, invalidVS))
	if code != http.StatusOK || resp.Allowed || resp.UID != "7c5e3c1a-0000-4000-8000-000000000001" {
		t.Fatalf("invalid object: %d %s", code, body)
	}
	if !strings.Contains(resp.Result.Message, "spec.http[0].route: weights sum to 90, want 100") {
		t.Errorf("denial %q does not name the field and the reason", resp.Result.Message)
	}
	code, resp, body = post(t, client, base+ValidatePath, "application/json; charset=utf-8", reviewOf(t, admissionv1.Create, validVS))
	if code != http.StatusOK || !resp.Allowed || len(resp.Warnings) != 1 {
		t.Fatalf("valid object with an undefined subset: %d %s", code, body)
	}
	// A review is counted once its response is written: awaited.
	testwait.For(t, testwait.Timeout, func() error {
		for result, want := range map[string]float64{"denied": 1, "allowed": 1, "error": 0} {
			if got := testutil.ToFloat64(s.metrics.reviews.WithLabelValues("validation", result)); got != want {
				return fmt.Errorf("reviews %s: %v, want %v", result, got, want)
			}
		}
		return nil
	})
}

// TestServerRefusesBadRequests sends what is not a review the server can
// answer: each gets a 4xx and a message saying why, and the server still
// answers a good review afterwards.
func TestServerRefusesBadRequests(t *testing.T) {
	_, base, client := validationServer(t, Options{MaxRequestBytes: MinMaxRequestBytes})
	good := reviewOf(t, admissionv1.Create, invalidVS)
	tests := []struct {
		name        string
		method      string
		contentType string
		body        []byte
		chunked     bool
		status      int
		want        string
	}{
		{"GET", http.MethodGet, "application/json", nil, false, 405, "an AdmissionReview is POSTed"},
		{"no content type", http.MethodPost, "", good, false, 415, `content type "": want application/json`},
		{"YAML", http.MethodPost, "application/yaml", good, false, 415, "want application/json"},
		{"protobuf", http.MethodPost, "application/vnd.kubernetes.protobuf", good, false, 415, "want application/json"},
		{"oversized", http.MethodPost, "application/json", bytes.Repeat([]byte(" "), MinMaxRequestBytes+1), false, 413, "more than the 65536 accepted"},
		{"oversized, chunked", http.MethodPost, "application/json", bytes.Repeat([]byte(" "), MinMaxRequestBytes+1), true, 413, "more than the 65536 bytes accepted"},
		{"empty", http.MethodPost, "application/json", nil, false, 400, "the body is empty"},
		{"truncated", http.MethodPost, "application/json", good[:len(good)/2], false, 400, "truncated body"},
		{"not JSON", http.MethodPost, "application/json", []byte("apiVersion: admission.k8s.io/v1"), false, 400, "invalid JSON at byte 1"},
		{"a list", http.MethodPost, "application/json", []byte(`[1,2]`), false, 400, "not a JSON array"},
		{"two objects", http.MethodPost, "application/json", append(append([]byte{}, good...), good...), false, 400, "data after the JSON object"},
		{"v1beta1", http.MethodPost, "application/json", bytes.Replace(good, []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v1beta1"), 1), false, 400, `apiVersion "admission.k8s.io/v1beta1"`},
		{"no request", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), false, 400, "holds no request"},
		{"no uid", http.MethodPost, "application/json", bytes.Replace(good, []byte(`"uid":"7c5e3c1a-0000-4000-8000-000000000001",`), nil, 1), false, 400, "request.uid is missing"},
		{"uid a number", http.MethodPost, "application/json", bytes.Replace(good, []byte(`"7c5e3c1a-0000-4000-8000-000000000001"`), []byte("7"), 1), false, 400, "uid must be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // no length: sent chunked
			}
			req, err := http.NewRequest(tc.method, base+ValidatePath, body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(msg), tc.want) {
				t.Errorf("%d %q, want %d and %q", resp.StatusCode, msg, tc.status, tc.want)
			}
			if code, r, body := post(t, client, base+ValidatePath, "application/json", good); code != 200 || r.Allowed {
				t.Fatalf("the server no longer answers: %d %s", code, body)
			}
		})
	}
	if code, _, body := post(t, client, base+"/inject", "application/json", good); code != http.StatusNotFound {
		t.Errorf("a path nobody handles: %d %s", code, body)
	}
}

// TestServerSurvivesReviewerPanics answers 500 for a reviewer that panics
// or returns nothing, and goes on serving.
func TestServerSurvivesReviewerPanics(t *testing.T) {
	s := NewServer(Options{})
	s.Handle("/panic", "panic", ReviewerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		panic("boom")
	}))
	s.Handle("/nothing", "nothing", ReviewerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return nil
	}))
	s.Handle(ValidatePath, "validation", NewValidator("cluster.local"))
	base, client := serve(t, s)
	for _, path := range []string{"/panic", "/nothing", "/panic"} {
		if code, _, body := post(t, client, base+path, "application/json", reviewOf(t, admissionv1.Create, validVS)); code != 500 || !strings.Contains(body, "internal error") {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}
	if code, resp, body := post(t, client, base+ValidatePath, "application/json", reviewOf(t, admissionv1.Create, validVS)); code != 200 || !resp.Allowed {
		t.Errorf("after panics: %d %s", code, body)
	}
}

// TestServerSurvivesGarbageConnections writes what is not TLS, and a
// handshake that stops half-way; the server goes on serving.
func TestServerSurvivesGarbageConnections(t *testing.T) {
	_, base, client := validationServer(t, Options{})
	addr := strings.TrimPrefix(base, "https://")
	for _, junk := range [][]byte{[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), {0x16, 0x03, 0x01, 0xff, 0xff, 0x01}, bytes.Repeat([]byte{0}, 4096)} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(junk)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}
	if code, resp, body := post(t, client, base+ValidatePath, "application/json", reviewOf(t, admissionv1.Create, invalidVS)); code != 200 || resp.Allowed {
		t.Errorf("after garbage: %d %s", code, body)
	}
}

func TestHandleTwicePanics(t *testing.T) {
	s := NewServer(Options{})
	s.Handle(ValidatePath, "validation", NewValidator("cluster.local"))
	defer func() {
		if recover() == nil {
			t.Error("a second Handle of the same path did not panic")
		}
	}()
	s.Handle(ValidatePath, "again", NewValidator("cluster.local"))
}
