package gatewaycert

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/navemesh/nave/internal/x509test"
)

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		in       string
		ns, name string
		gw, ca   bool
		err      string
	}{
		{in: "web-cert", ns: "edge", name: "web-cert"},
		{in: "kubernetes://web-cert", ns: "edge", name: "web-cert"},
		{in: "kubernetes://other/web-cert", ns: "other", name: "web-cert"},
		{in: "web-cert-cacert", ns: "edge", name: "web-cert-cacert", ca: true},
		{in: "kubernetes-gateway://certs/shared", ns: "certs", name: "shared", gw: true},
		{in: "kubernetes-gateway://certs/shared-cacert", ns: "certs", name: "shared-cacert", gw: true, ca: true},
		{in: "kubernetes-gateway://shared", err: "kubernetes-gateway://NAMESPACE/NAME"},
		{in: "kubernetes-gateway:///shared", err: "kubernetes-gateway://NAMESPACE/NAME"},
		{in: "configmap://certs/ca", err: "not a Kubernetes Secret name"},
		{in: "sds://vault/cert", err: "not a Kubernetes Secret name"},
		{in: "kubernetes://", err: "not a Secret's name"},
		{in: "kubernetes://a/b/c", err: "not a Secret's name"},
	} {
		r, err := ParseName(tc.in, "edge")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || r.Namespace != tc.ns || r.Name != tc.name || r.GatewayAPI != tc.gw || r.CAOnly != tc.ca || r.Resource != tc.in {
			t.Errorf("%s: %+v (%v)", tc.in, r, err)
		}
	}
	if r, _ := ParseName("web-cert-cacert", "edge"); r.caFallback() != "edge/web-cert" {
		t.Errorf("fallback of web-cert-cacert: %s", r.caFallback())
	}
}

// secretData is a certificate and key as PEM, and the CA's bundle.
func secretData(t *testing.T) (cert, key, ca []byte) {
	t.Helper()
	auth := x509test.NewAuthority("gw-ca")
	c := auth.ServerCert("web.example.com")
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Leaf.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), auth.PEM()
}

// TestSecretShapes: Istio's shapes (generic cert/key/cacert first, then
// kubernetes.io/tls tls.crt/tls.key/ca.crt) and the reasons for the rest,
// which never quote a value.
func TestSecretShapes(t *testing.T) {
	cert, key, ca := secretData(t)
	_, otherKey, _ := secretData(t)
	for _, tc := range []struct {
		name string
		data map[string][]byte
		tls  bool // a certificate, else a validation context
		err  string
	}{
		{name: "generic", data: map[string][]byte{"cert": cert, "key": key}, tls: true},
		{name: "kubernetes.io/tls", data: map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca}, tls: true},
		{name: "generic first", data: map[string][]byte{"cert": cert, "key": key, "tls.crt": []byte("x"), "tls.key": []byte("y")}, tls: true},
		{name: "CA only (caCertCredentialName)", data: map[string][]byte{"ca.crt": ca}},
		{name: "empty", data: map[string][]byte{"tls.crt": {}, "tls.key": {}}, err: `keys "tls.crt" and "tls.key" are empty`},
		{name: "wrong keys", data: map[string][]byte{"password": []byte("hunter2")}, err: "found [password]"},
		{name: "not a pair", data: map[string][]byte{"tls.crt": cert, "tls.key": otherKey}, err: "do not make a pair"},
	} {
		s, err := certificateSecret("web-cert", tc.data)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("%s: %v, want an error with %q (no value quoted)", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.tls && string(s.GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != string(key):
			t.Errorf("%s: %v, want the certificate and key", tc.name, s)
		case !tc.tls && string(s.GetValidationContext().GetTrustedCa().GetInlineBytes()) != string(ca):
			t.Errorf("%s: %v, want the CA bundle", tc.name, s)
		case s.GetName() != "web-cert":
			t.Errorf("%s: named %q", tc.name, s.GetName())
		}
	}
	for _, tc := range []struct {
		name string
		data map[string][]byte
		err  string
	}{
		{name: "generic cacert", data: map[string][]byte{"cacert": ca, "crl": []byte("crl")}},
		{name: "tls ca.crt", data: map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca}},
		{name: "none", data: map[string][]byte{"tls.crt": cert, "tls.key": key}, err: "no CA bundle"},
		{name: "not PEM", data: map[string][]byte{"ca.crt": []byte("junk")}, err: "no PEM certificate"},
	} {
		s, err := caSecret("web-cert-cacert", tc.data)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || string(s.GetValidationContext().GetTrustedCa().GetInlineBytes()) != string(ca) {
			t.Errorf("%s: %v (%v)", tc.name, s, err)
		}
	}
}

func TestReferenceGrant(t *testing.T) {
	grant := func(fromNS, toKind, toName string) map[string]any {
		to := map[string]any{"group": "", "kind": toKind}
		if toName != "" {
			to["name"] = toName
		}
		return map[string]any{"spec": map[string]any{
			"from": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": fromNS}},
			"to":   []any{to},
		}}
	}
	for _, tc := range []struct {
		name  string
		grant map[string]any
		want  bool
	}{
		{"the Secret by name", grant("edge", "Secret", "shared"), true},
		{"every Secret", grant("edge", "Secret", ""), true},
		{"another Secret", grant("edge", "Secret", "other"), false},
		{"another namespace's Gateways", grant("web", "Secret", "shared"), false},
		{"not Secrets", grant("edge", "Service", ""), false},
		{"HTTPRoutes, not Gateways", map[string]any{"spec": map[string]any{
			"from": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "edge"}},
			"to":   []any{map[string]any{"group": "", "kind": "Secret"}}}}, false},
		{"no spec", map[string]any{}, false},
	} {
		if got := grantAllows(tc.grant, "edge", "shared"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
