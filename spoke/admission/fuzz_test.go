package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// FuzzReview feeds arbitrary bodies to the validation webhook, as the API
// server (or anyone reaching the listener) could send them: DecodeReview
// either returns a review with a request and a uid or a *BadReviewError;
// the handler answers 200 with an AdmissionReview v1 for the same uid, or
// 400 or 413 with a message saying why — never a 500 (a panic in decoding
// or validation). Seeds live in testdata/fuzz/FuzzReview.
func FuzzReview(f *testing.F) {
	s := NewServer(Options{MaxRequestBytes: MinMaxRequestBytes})
	v := NewValidator("cluster.local")
	s.Handle(ValidatePath, "validation", v)
	objs, errs := decodeForFuzz(reviewsDR)
	if errs != nil {
		f.Fatal(errs)
	}
	v.Update(objs)
	f.Fuzz(func(t *testing.T, body []byte) {
		rv, err := DecodeReview(body)
		var bad *BadReviewError
		switch {
		case err == nil && (rv.Request == nil || rv.Request.UID == ""):
			t.Fatalf("decoded a review without a request or uid: %+v", rv)
		case err != nil && !errors.As(err, &bad):
			t.Fatalf("error %T %v is not a *BadReviewError", err, err)
		}

		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, ValidatePath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			if err != nil {
				t.Fatalf("answered a body DecodeReview refuses (%v)", err)
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("answer %q is not an AdmissionReview: %v", rec.Body.String(), err)
			}
			if out.Response.UID != rv.Request.UID || out.APIVersion != ReviewAPIVersion || out.Kind != ReviewKind {
				t.Fatalf("answer %q is not for uid %q", rec.Body.String(), rv.Request.UID)
			}
			if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Message == "") {
				t.Fatalf("a denial without a message: %q", rec.Body.String())
			}
		case http.StatusBadRequest:
			if err == nil || !strings.HasPrefix(rec.Body.String(), "bad AdmissionReview: ") {
				t.Fatalf("400 %q for a body DecodeReview accepts (err %v)", rec.Body.String(), err)
			}
		case http.StatusRequestEntityTooLarge:
			if len(body) <= MinMaxRequestBytes {
				t.Fatalf("413 for %d bytes", len(body))
			}
		default:
			t.Fatalf("status %d: %q", rec.Code, rec.Body.String())
		}
	})
}
