package inject

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// testTrust is the trust material of the tests' spoke.
var testTrust = Trust{
	TrustDomain: "cluster.local",
	MeshRoots:   []byte("-----BEGIN CERTIFICATE-----\nbWVzaCByb290\n-----END CERTIFICATE-----\n"),
	HubCA:       []byte("-----BEGIN CERTIFICATE-----\naHViIGNh\n-----END CERTIFICATE-----\n"),
}

func testOptions() Options {
	return Options{
		SystemNamespace: "nave-system", Mesh: "default", Cluster: "c1", DomainSuffix: "cluster.local", ProxyImage: "ghcr.io/navemesh/nave-proxy:test",
		PullPolicy: corev1.PullIfNotPresent, RAAddress: "nave-spoke.nave-system.svc:15023", XDSAddress: "hub.example.com:15010",
		Trust: func() (Trust, error) { return testTrust, nil },
	}
}

func newTestInjector(t testing.TB, mod func(*Options)) *Injector {
	t.Helper()
	o := testOptions()
	if mod != nil {
		mod(&o)
	}
	in, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

var notEnrolled = func() (Trust, error) { return Trust{}, errors.New("not enrolled yet") }

// podRequest is the admission request creating the pod given as YAML
// (or JSON) in namespace.
func podRequest(t testing.TB, namespace string, podYAML []byte) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := yaml.YAMLToJSON(podYAML)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		UID: types.UID("uid-1"), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: namespace,
		Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
	}
}

// applyPatch applies resp's JSON patch to the request's object, as the
// API server does; with no patch it returns the object unchanged.
func applyPatch(t testing.TB, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) []byte {
	t.Helper()
	if resp.Patch == nil {
		return req.Object.Raw
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v, want JSONPatch", resp.PatchType)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("the patch does not decode: %v\n%s", err, resp.Patch)
	}
	out, err := p.Apply(req.Object.Raw)
	if err != nil {
		t.Fatalf("the patch does not apply: %v\n%s", err, resp.Patch)
	}
	// The patched object is a Pod with no field a Pod lacks, if the
	// request's was.
	if strictPod(req.Object.Raw) == nil {
		if err := strictPod(out); err != nil {
			t.Fatalf("the patched object is not a Pod: %v", err)
		}
	}
	return out
}

func strictPod(raw []byte) error {
	var pod corev1.Pod
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(&pod)
}

// review runs in on req and returns the response and the patched pod.
func review(t testing.TB, in *Injector, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, *corev1.Pod, []byte) {
	t.Helper()
	resp := in.Review(context.Background(), req)
	if resp == nil {
		t.Fatal("no response")
	}
	if !resp.Allowed {
		return resp, nil, nil
	}
	out := applyPatch(t, req, resp)
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		t.Fatal(err)
	}
	return resp, &pod, out
}
