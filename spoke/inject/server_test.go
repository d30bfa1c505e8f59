package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/navemesh/nave/spoke/admission"
)

// reviewBody is the AdmissionReview the API server sends for req.
func reviewBody(t testing.TB, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	rv := admissionv1.AdmissionReview{Request: req}
	rv.APIVersion, rv.Kind = admission.ReviewAPIVersion, admission.ReviewKind
	b, err := json.Marshal(&rv)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// server is the webhook server with the injector at Path, as nave-spoke
// builds it, with the smallest body limit.
func server(t testing.TB, in *Injector) *admission.Server {
	s := admission.NewServer(admission.Options{MaxRequestBytes: admission.MinMaxRequestBytes})
	s.Handle(Path, "injection", in)
	return s
}

// call POSTs body to s and returns the status and the body.
func call(s http.Handler, method, ctype string, body []byte) (int, string) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	s.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// TestServedBadInput sends the injector's path what the API server never
// should: each is answered with a 4xx saying why (or a 500 for a panic),
// and the next good review is injected.
func TestServedBadInput(t *testing.T) {
	calls := 0
	in := newTestInjector(t, func(o *Options) {
		o.Trust = func() (Trust, error) {
			calls++
			if calls == 1 {
				panic("trust source broken")
			}
			return testTrust, nil
		}
	})
	s := server(t, in)
	good := reviewBody(t, podRequest(t, "shop", []byte(minimalPod)))
	for _, tc := range []struct {
		name, method, ctype string
		body                []byte
		code                int
		says                string
	}{
		{"GET", http.MethodGet, "application/json", good, http.StatusMethodNotAllowed, "an AdmissionReview is POSTed"},
		{"wrong content type", http.MethodPost, "application/yaml", good, http.StatusUnsupportedMediaType, "want application/json"},
		{"oversized", http.MethodPost, "application/json", append(good, bytes.Repeat([]byte(" "), admission.MinMaxRequestBytes)...), http.StatusRequestEntityTooLarge, "more than the 65536 accepted"},
		{"truncated", http.MethodPost, "application/json", good[:len(good)/2], http.StatusBadRequest, "truncated body"},
		{"malformed", http.MethodPost, "application/json", []byte(`{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}`), http.StatusBadRequest, "must be"},
		{"v1beta1", http.MethodPost, "application/json", []byte(`{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "1"}}`), http.StatusBadRequest, "admissionReviewVersions [v1]"},
		{"no uid", http.MethodPost, "application/json", []byte(`{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}`), http.StatusBadRequest, "request.uid is missing"},
		{"a panicking reviewer", http.MethodPost, "application/json", good, http.StatusInternalServerError, "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := call(s, tc.method, tc.ctype, tc.body)
			if code != tc.code || !strings.Contains(body, tc.says) {
				t.Errorf("%d %q, want %d saying %q", code, body, tc.code, tc.says)
			}
		})
	}
	code, body := call(s, http.MethodPost, "application/json", good)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal([]byte(body), &out); code != http.StatusOK || err != nil || out.Response == nil || out.Response.Patch == nil {
		t.Fatalf("after the bad requests: %d %q, want a patch", code, body)
	}
	if out.Response.UID != "uid-1" {
		t.Errorf("answer for uid %q, want uid-1", out.Response.UID)
	}
}

// FuzzInjectReview feeds arbitrary bodies to the injector's path: the
// answer is a 4xx saying why or a 200 AdmissionReview for the request's
// uid, never a 500; an allowed answer's patch applies to the request's
// object and gives a Pod; a denial has a message. Seeds live in
// testdata/fuzz/FuzzInjectReview (go test -run TestFuzzSeeds -update
// rewrites them).
func FuzzInjectReview(f *testing.F) {
	s := server(f, newTestInjector(f, nil))
	f.Fuzz(func(t *testing.T, body []byte) {
		code, text := call(s, http.MethodPost, "application/json", body)
		switch code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if text == "" {
				t.Fatalf("%d without a reason", code)
			}
			return
		default:
			t.Fatalf("status %d: %q", code, text)
		}
		rv, err := admission.DecodeReview(body)
		if err != nil {
			t.Fatalf("answered a body DecodeReview refuses (%v)", err)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal([]byte(text), &out); err != nil || out.Response == nil || out.Response.UID != rv.Request.UID {
			t.Fatalf("answer %q is not an AdmissionReview for uid %q: %v", text, rv.Request.UID, err)
		}
		if !out.Response.Allowed {
			if out.Response.Result == nil || out.Response.Result.Message == "" {
				t.Fatalf("a denial without a message: %q", text)
			}
			return
		}
		if out.Response.Patch != nil {
			applyPatch(t, rv.Request, out.Response)
		}
	})
}

// fuzzSeeds are FuzzInjectReview's seed corpus: the golden pods' reviews
// and damaged or odd versions of one.
func fuzzSeeds(t *testing.T) map[string][]byte {
	seeds := map[string][]byte{}
	files, _ := filepath.Glob("testdata/pods/*.yaml")
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		seeds["pod-"+strings.TrimSuffix(filepath.Base(f), ".yaml")] = reviewBody(t, podRequest(t, "shop", src))
	}
	good := reviewBody(t, podRequest(t, "shop", []byte(minimalPod)))
	seeds["truncated"] = good[:len(good)*2/3]
	seeds["empty"] = []byte{}
	seeds["null-request"] = []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`)
	seeds["object-not-a-pod"] = []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE",` +
		`"resource":{"version":"v1","resource":"pods"},"namespace":"shop","object":{"spec":{"containers":{}}}}}`)
	seeds["object-missing"] = []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE",` +
		`"resource":{"version":"v1","resource":"pods"},"namespace":"shop"}}`)
	seeds["keys-to-escape"] = reviewBody(t, podRequest(t, "shop", []byte(
		"metadata: {name: p, labels: {a/b~c: x}, annotations: {x~/y: z, inject.istio.io/templates: \" grpc-agent, \"}}\n"+
			"spec: {containers: [{name: a, image: a, env: [{name: E, value: v}], volumeMounts: [{name: v, mountPath: /v}]}], volumes: [{name: v, emptyDir: {}}]}\n")))
	seeds["unknown-template"] = reviewBody(t, podRequest(t, "shop", []byte(
		"metadata: {name: p, annotations: {inject.istio.io/templates: waypoint}}\nspec: {containers: [{name: a, image: a}]}\n")))
	return seeds
}

// TestFuzzSeeds keeps the committed seed corpus of FuzzInjectReview
// equal to fuzzSeeds.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzInjectReview")
	for name, body := range fuzzSeeds(t) {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", body)
		path := filepath.Join(dir, name)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("seed %s is missing or stale (go test -run TestFuzzSeeds -update): %v", path, err)
		}
	}
}
