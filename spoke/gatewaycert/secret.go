package gatewaycert

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	corev1 "k8s.io/api/core/v1"
)

// The keys of the Secret shapes Istio accepts
// (pilot/pkg/credentials/kube/secrets.go): a generic Secret's, tried
// first, then a kubernetes.io/tls Secret's.
const (
	genericCert   = "cert"
	genericKey    = "key"
	genericCACert = "cacert"
	genericCRL    = "crl"
	tlsCert       = corev1.TLSCertKey       // tls.crt
	tlsKey        = corev1.TLSPrivateKeyKey // tls.key
	tlsCACert     = "ca.crt"
	tlsCRL        = "ca.crl"
)

// certificateSecret is the Envoy secret named resource of a Secret's
// data: its certificate and key, which must make a pair. A Secret that
// holds only a CA bundle gives the validation context instead (a
// caCertCredentialName names such a Secret).
func certificateSecret(resource string, data map[string][]byte) (*tlsv3.Secret, error) {
	var cert, key []byte
	switch {
	case hasValues(data, genericCert, genericKey):
		cert, key = data[genericCert], data[genericKey]
	case hasValues(data, tlsCert, tlsKey):
		cert, key = data[tlsCert], data[tlsKey]
	case hasKeys(data, genericCert, genericKey):
		return nil, fmt.Errorf("keys %q and %q are empty", genericCert, genericKey)
	case hasKeys(data, tlsCert, tlsKey):
		return nil, fmt.Errorf("keys %q and %q are empty", tlsCert, tlsKey)
	default:
		if s, err := caSecret(resource, data); err == nil {
			return s, nil
		}
		return nil, fmt.Errorf("no certificate: want keys %q and %q (generic) or %q and %q (kubernetes.io/tls), or only a CA bundle; found [%s]",
			genericCert, genericKey, tlsCert, tlsKey, keyList(data))
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		return nil, fmt.Errorf("the certificate and key do not make a pair: %w", err)
	}
	tc := &tlsv3.TlsCertificate{CertificateChain: inline(cert), PrivateKey: inline(key)}
	return &tlsv3.Secret{Name: resource, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: tc}}, nil
}

// caSecret is the validation context (CA bundle and CRL) of a Secret's
// data: "cacert" (generic), else "ca.crt" (kubernetes.io/tls).
func caSecret(resource string, data map[string][]byte) (*tlsv3.Secret, error) {
	var ca, crl []byte
	switch {
	case hasValues(data, genericCACert):
		ca, crl = data[genericCACert], data[genericCRL]
	case hasValues(data, tlsCACert):
		ca, crl = data[tlsCACert], data[tlsCRL]
	default:
		return nil, fmt.Errorf("no CA bundle: want key %q (generic) or %q (kubernetes.io/tls), non-empty; found [%s]", genericCACert, tlsCACert, keyList(data))
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the CA bundle holds no PEM certificate")
	}
	vc := &tlsv3.CertificateValidationContext{TrustedCa: inline(ca)}
	if len(crl) > 0 {
		vc.Crl = inline(crl)
	}
	return &tlsv3.Secret{Name: resource, Type: &tlsv3.Secret_ValidationContext{ValidationContext: vc}}, nil
}

func inline(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

func hasKeys(d map[string][]byte, keys ...string) bool {
	for _, k := range keys {
		if _, ok := d[k]; !ok {
			return false
		}
	}
	return true
}

func hasValues(d map[string][]byte, keys ...string) bool {
	for _, k := range keys {
		if len(d[k]) == 0 {
			return false
		}
	}
	return true
}

// keyList names a Secret's keys (never its values), at most 5.
func keyList(d map[string][]byte) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > 5 {
		keys = append(keys[:5], fmt.Sprintf("and %d more", len(keys)-5))
	}
	return strings.Join(keys, ", ")
}
