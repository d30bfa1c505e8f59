package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	admissionv1 "k8s.io/api/admission/v1"
)

// API version and kind of the only AdmissionReview the server accepts.
const (
	ReviewAPIVersion = "admission.k8s.io/v1"
	ReviewKind       = "AdmissionReview"
)

// BadReviewError says why a request body is not an AdmissionReview the
// server can answer. Its message never quotes more than a few bytes of
// the body.
type BadReviewError struct{ Reason string }

func (e *BadReviewError) Error() string { return "bad AdmissionReview: " + e.Reason }

func badReview(format string, args ...any) error {
	return &BadReviewError{Reason: fmt.Sprintf(format, args...)}
}

// reviewHeader is read first, so that a review of another version is
// refused by name before its request is decoded.
type reviewHeader struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Request    json.RawMessage `json:"request"`
}

// DecodeReview decodes an admission.k8s.io/v1 AdmissionReview request: one
// JSON object (white space around it, nothing else) whose apiVersion and
// kind say so, holding a request with a uid. Any other body is a
// *BadReviewError. The returned review's Request is never nil.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badReview("the body is empty")
	}
	var h reviewHeader
	if err := decodeStrictlyOne(body, &h); err != nil {
		return nil, err
	}
	if h.APIVersion != ReviewAPIVersion || h.Kind != ReviewKind {
		return nil, badReview("apiVersion %q and kind %q: want %s %s (register the webhook with admissionReviewVersions [v1])",
			clip(h.APIVersion), clip(h.Kind), ReviewAPIVersion, ReviewKind)
	}
	if len(h.Request) == 0 || string(h.Request) == "null" {
		return nil, badReview("it holds no request")
	}
	var req admissionv1.AdmissionRequest
	if err := json.Unmarshal(h.Request, &req); err != nil {
		return nil, badReview("request: %s", jsonReason(err))
	}
	if req.UID == "" {
		return nil, badReview("request.uid is missing")
	}
	return &admissionv1.AdmissionReview{Request: &req}, nil
}

// decodeStrictlyOne decodes body, which must be exactly one JSON object,
// into v.
func decodeStrictlyOne(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return badReview("%s", jsonReason(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badReview("data after the JSON object")
	}
	return nil
}

// jsonReason says what is wrong with a body in encoding/json's words,
// which quote at most a character of it; a truncated body says so.
func jsonReason(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the JSON ends early (truncated body?)"
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d: %s", syn.Offset, clip(syn.Error()))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "the body"
		}
		return fmt.Sprintf("%s must be %s, not a JSON %s", clip(field), typ.Type, typ.Value)
	default:
		return clip(err.Error())
	}
}

// EncodeReview encodes the answer to a review: an AdmissionReview of the
// same version holding resp, whose UID must be the request's.
func EncodeReview(resp *admissionv1.AdmissionResponse) ([]byte, error) {
	out := admissionv1.AdmissionReview{Response: resp}
	out.APIVersion, out.Kind = ReviewAPIVersion, ReviewKind
	return json.Marshal(&out)
}

// maxQuoted bounds what an error quotes of a request.
const maxQuoted = 120

// Clip is s cut to what an answer may quote of a request (120 bytes, on a
// character boundary, with "…" when cut): reviewers quote with it too.
func Clip(s string) string { return clip(s) }

func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
