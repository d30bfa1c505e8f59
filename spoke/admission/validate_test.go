package admission

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/navemesh/nave/shared/meshconfig"
)

func decodedRequest(t *testing.T, op admissionv1.Operation, obj string) *admissionv1.AdmissionRequest {
	t.Helper()
	rv, err := DecodeReview(reviewOf(t, op, obj))
	if err != nil {
		t.Fatal(err)
	}
	return rv.Request
}

func loadedValidator(t *testing.T, docs string) *Validator {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(docs), "cluster.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	v := NewValidator(meshconfig.DefaultDomainSuffix)
	v.Update(objs)
	return v
}

func TestValidatorDeniesNamingTheField(t *testing.T) {
	v := loadedValidator(t, reviewsDR)
	resp := v.Review(context.Background(), decodedRequest(t, admissionv1.Create, invalidVS))
	if resp.Allowed || resp.Result == nil {
		t.Fatalf("invalid VirtualService admitted: %+v", resp)
	}
	const want = "VirtualService shop/reviews: spec.http[0].route: weights sum to 90, want 100"
	if resp.Result.Message != want {
		t.Errorf("message %q, want %q", resp.Result.Message, want)
	}
	if c := resp.Result.Details.Causes; len(c) != 1 || c[0].Field != "spec.http[0].route" || c[0].Message != "weights sum to 90, want 100" {
		t.Errorf("causes %+v", c)
	}
	if resp.Result.Code != 422 || resp.Result.Reason != "Invalid" {
		t.Errorf("code %d reason %q", resp.Result.Code, resp.Result.Reason)
	}
}

func TestValidatorDeniesWhatTheDecoderRefuses(t *testing.T) {
	v := loadedValidator(t, "")
	tests := []struct{ name, obj, want string }{
		{"unknown spec field", strings.Replace(validVS, "hosts: [reviews]", "hosts: [reviews]\n  hostz: [x]", 1), `spec.hostz: unknown field "hostz"`},
		{"unknown metadata field", strings.Replace(validVS, "uid: 9d0b", "uid: 9d0b, colour: red", 1), `metadata.colour: unknown field "colour"`},
		{"bad host", strings.Replace(invalidVS, "hosts: [reviews]", "hosts: ['http://reviews']", 1), "spec.hosts[0]"},
		{"not an object", "just a string", "not a mapping"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := v.Review(context.Background(), decodedRequest(t, admissionv1.Update, tc.obj))
			if resp.Allowed || !strings.Contains(resp.Result.Message, tc.want) {
				t.Errorf("response %+v, want a denial naming %q", resp.Result, tc.want)
			}
		})
	}
}

func TestValidatorWarnsOfUndefinedSubsets(t *testing.T) {
	v := loadedValidator(t, reviewsDR)
	resp := v.Review(context.Background(), decodedRequest(t, admissionv1.Create, validVS))
	if !resp.Allowed {
		t.Fatalf("valid VirtualService denied: %+v", resp.Result)
	}
	want := `spec.http[0].route[1].destination.subset: subset "v2" is not defined by the DestinationRules of reviews.shop.svc.cluster.local in this cluster (shop/reviews: subsets v1)`
	if len(resp.Warnings) != 1 || resp.Warnings[0] != want {
		t.Errorf("warnings %q, want [%q]", resp.Warnings, want)
	}

	full := loadedValidator(t, strings.Replace(reviewsDR, "{name: v1, labels: {version: v1}}", "{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}", 1))
	if resp := full.Review(context.Background(), decodedRequest(t, admissionv1.Create, validVS)); !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("with both subsets defined: %+v", resp)
	}
}

func TestValidatorBeforeTheClusterIsLoaded(t *testing.T) {
	v := NewValidator(meshconfig.DefaultDomainSuffix)
	resp := v.Review(context.Background(), decodedRequest(t, admissionv1.Create, validVS))
	if !resp.Allowed || len(resp.Warnings) != 1 || resp.Warnings[0] != notLoaded {
		t.Errorf("before Update: %+v", resp)
	}
	noSubsets := strings.ReplaceAll(strings.ReplaceAll(validVS, ", subset: v1", ""), ", subset: v2", "")
	if resp := v.Review(context.Background(), decodedRequest(t, admissionv1.Create, noSubsets)); !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("no subsets, before Update: %+v", resp)
	}
}

func TestValidatorAdmitsOtherOperations(t *testing.T) {
	v := loadedValidator(t, "")
	for _, op := range []admissionv1.Operation{admissionv1.Delete, admissionv1.Connect} {
		if resp := v.Review(context.Background(), decodedRequest(t, op, invalidVS)); !resp.Allowed {
			t.Errorf("%s denied: %+v", op, resp.Result)
		}
	}
	if resp := v.Review(context.Background(), decodedRequest(t, admissionv1.Create, "")); resp.Allowed {
		t.Error("a CREATE without an object was admitted")
	}
}

func TestValidatorAcceptsEveryServedVersion(t *testing.T) {
	v := loadedValidator(t, "")
	for _, version := range []string{"v1", "v1beta1", "v1alpha3"} {
		obj := strings.Replace(validVS, "networking.istio.io/v1", "networking.istio.io/"+version, 1)
		if resp := v.Review(context.Background(), decodedRequest(t, admissionv1.Create, obj)); !resp.Allowed {
			t.Errorf("%s denied: %+v", version, resp.Result)
		}
	}
	js, _ := json.Marshal(map[string]any{"apiVersion": "security.istio.io/v1beta1", "kind": "PeerAuthentication",
		"metadata": map[string]any{"name": "default", "namespace": "shop"}, "spec": map[string]any{"mtls": map[string]any{"mode": "STRICTER"}}})
	resp := v.Review(context.Background(), decodedRequest(t, admissionv1.Create, string(js)))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "spec.mtls.mode") {
		t.Errorf("PeerAuthentication with a bad mode: %+v", resp.Result)
	}
}
