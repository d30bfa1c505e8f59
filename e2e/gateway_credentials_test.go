package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/typeurl"
)

// referenceGrantCRD is the Gateway API's ReferenceGrant, enough of it for
// the API server to store and serve the objects (the spoke reads v1beta1).
const referenceGrantCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: referencegrants.gateway.networking.k8s.io
  annotations: {api-approved.kubernetes.io: "https://github.com/kubernetes-sigs/gateway-api/pull/3328"}
spec:
  group: gateway.networking.k8s.io
  names: {kind: ReferenceGrant, listKind: ReferenceGrantList, plural: referencegrants, singular: referencegrant}
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// gatewayCredentialsWorld is namespace edge with the gateway's service
// account gw (and Istio's Role for it), namespace certs holding a shared
// Secret, and the spoke bound to nave-spoke-gateway-credentials in both, as
// docs/gateways.md says to.
const gatewayCredentialsWorld = `apiVersion: v1
kind: Namespace
metadata: {name: edge}
---
apiVersion: v1
kind: Namespace
metadata: {name: certs}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: gw, namespace: edge}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: gw-credentials, namespace: edge}
rules: [{apiGroups: [""], resources: [secrets], verbs: [get, watch, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: gw-credentials, namespace: edge}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: gw-credentials}
subjects: [{kind: ServiceAccount, name: gw, namespace: edge}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: nave-spoke-gateway-credentials, namespace: edge}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: nave-spoke-gateway-credentials}
subjects: [{kind: ServiceAccount, name: nave-spoke, namespace: nave-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: nave-spoke-gateway-credentials, namespace: certs}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: nave-spoke-gateway-credentials}
subjects: [{kind: ServiceAccount, name: nave-spoke, namespace: nave-system}]
`

// tlsSecret is a kubernetes.io/tls Secret of a fresh certificate for host
// issued by ca, with ca's bundle as ca.crt.
func tlsSecret(ns, name, host string, ca *x509test.Authority) (*corev1.Secret, *x509.Certificate) {
	cert := ca.ServerCert(host)
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		panic(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Leaf.Raw}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"ca.crt":  ca.PEM(),
	}}, cert.Leaf
}

// gatewaySDS is an SDS stream to an agent's socket, as a gateway's Envoy
// opens one.
type gatewaySDS struct {
	t      *testing.T
	stream secretv3.SecretDiscoveryService_StreamSecretsClient
	names  []string
	resps  chan *discoveryv3.DiscoveryResponse
}

func openGatewaySDS(t *testing.T, sock string) *gatewaySDS {
	t.Helper()
	stream := dialSDS(t, sock)
	g := &gatewaySDS{t: t, stream: stream, resps: make(chan *discoveryv3.DiscoveryResponse, 16)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(g.resps)
				return
			}
			g.resps <- r
		}
	}()
	return g
}

// ask subscribes to names (ACKing last, if any).
func (g *gatewaySDS) ask(last *discoveryv3.DiscoveryResponse, names ...string) {
	g.t.Helper()
	g.names = names
	req := &discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: names}
	if last != nil {
		req.VersionInfo, req.ResponseNonce = last.GetVersionInfo(), last.GetNonce()
	}
	if err := g.stream.Send(req); err != nil {
		g.t.Fatal(err)
	}
}

// until receives responses (ACKing each) until one satisfies ok, and
// returns it with its secrets by name.
func (g *gatewaySDS) until(what string, ok func(map[string]*tlsv3.Secret) bool) (*discoveryv3.DiscoveryResponse, map[string]*tlsv3.Secret) {
	g.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case r, open := <-g.resps:
			if !open {
				g.t.Fatalf("the agent's SDS stream ended, waiting for %s", what)
			}
			out := map[string]*tlsv3.Secret{}
			for _, a := range r.GetResources() {
				s := &tlsv3.Secret{}
				if err := a.UnmarshalTo(s); err != nil {
					g.t.Fatal(err)
				}
				out[s.GetName()] = s
			}
			g.ask(r, g.names...)
			if ok(out) {
				return r, out
			}
		case <-deadline:
			g.t.Fatalf("no SDS response with %s within 60s", what)
		}
	}
}

// servedLeaf is the certificate of a served TLS secret, checked to pair
// with its key.
func servedLeaf(t *testing.T, s *tlsv3.Secret) *x509.Certificate {
	t.Helper()
	tc := s.GetTlsCertificate()
	pair, err := tls.X509KeyPair(tc.GetCertificateChain().GetInlineBytes(), tc.GetPrivateKey().GetInlineBytes())
	if err != nil {
		t.Fatalf("%s: %v", s.GetName(), err)
	}
	return pair.Leaf
}

// gatewayCredentialsView is the spoke's /debug/gateway-credentials.
type gatewayCredentialsView struct {
	Streams []struct {
		Identity string `json:"identity"`
		Names    []struct {
			Name    string `json:"name"`
			Served  bool   `json:"served"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"names"`
	} `json:"streams"`
}

// TestGatewayCredentialsFromSecrets is issue 29's proof of credentialName:
// a real nave-agent as a gateway's (envoy mode, its SDS socket read here as
// Envoy reads it) serves the certificate of a Secret in a real API server,
// got through the real spoke with the gateway's service-account token; a
// rotated Secret reaches it on the open stream, without a restart; the
// "-cacert" bundle comes from the Secret's ca.crt; a Secret of another
// namespace is refused with a reason (debug view, metric) until a
// ReferenceGrant there allows it, then served.
func TestGatewayCredentialsFromSecrets(t *testing.T) {
	c := kubeCluster(t)
	c.Apply(t, []byte(referenceGrantCRD))
	c.Apply(t, []byte(gatewayCredentialsWorld))
	a, h, sp := agentSpoke(t, c)
	cs := a.cs

	ca := x509test.NewAuthority("ingress-ca")
	ctx := context.Background()
	web, webLeaf := tlsSecret("edge", "web-cert", "web.example.com", ca)
	if _, err := cs.CoreV1().Secrets("edge").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	shared, sharedLeaf := tlsSecret("certs", "shared", "shared.example.com", ca)
	shared.Type, shared.Data = corev1.SecretTypeOpaque, map[string][]byte{"cert": shared.Data["tls.crt"], "key": shared.Data["tls.key"]} // the generic shape
	if _, err := cs.CoreV1().Secrets("certs").Create(ctx, shared, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	p := startAgent(t, a, h, a.ra, podEnv{name: "ingress-1", namespace: "edge", sa: "gw", mode: "envoy",
		labels: map[string]string{"istio": "ingressgateway"}, extra: []string{"NAVE_PROXY_TYPE=router"}})
	sds := openGatewaySDS(t, filepath.Join(p.dir, "sds.sock"))
	const crossNS = "kubernetes-gateway://certs/shared"
	sds.ask(nil, "web-cert", "web-cert-cacert", crossNS)

	// The Secret's certificate and its -cacert bundle, the workload's own not mixed in.
	_, got := sds.until("web-cert and web-cert-cacert", func(s map[string]*tlsv3.Secret) bool {
		return s["web-cert"] != nil && s["web-cert-cacert"] != nil
	})
	if leaf := servedLeaf(t, got["web-cert"]); !leaf.Equal(webLeaf) {
		t.Errorf("web-cert serves %s; want the Secret's certificate", leaf.Subject)
	}
	if ca := got["web-cert-cacert"].GetValidationContext().GetTrustedCa().GetInlineBytes(); string(ca) != string(web.Data["ca.crt"]) {
		t.Errorf("web-cert-cacert is not the Secret's ca.crt")
	}
	if got[crossNS] != nil || got["default"] != nil {
		t.Errorf("served %v; want no Secret of another namespace without a ReferenceGrant, and no workload secret unasked", slices.Sorted(maps.Keys(got)))
	}

	// The cross-namespace reference is refused with a reason.
	refusal := func() (string, error) {
		var v gatewayCredentialsView
		body, err := httpGet(sp.url("/debug/gateway-credentials"))
		if err != nil {
			return "", err
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			return "", err
		}
		for _, st := range v.Streams {
			for _, n := range st.Names {
				if st.Identity == "edge/gw" && n.Name == crossNS && !n.Served {
					return n.Reason + ": " + n.Message, nil
				}
			}
		}
		return "", fmt.Errorf("no refusal of %s in %s", crossNS, body)
	}
	testwait.For(t, 30*time.Second, func() error {
		why, err := refusal()
		if err != nil {
			return err
		}
		if want := "no_reference_grant: no ReferenceGrant in namespace certs allows Gateways of namespace edge"; len(why) < len(want) || why[:len(want)] != want {
			return fmt.Errorf("refusal %q; want %q…", why, want)
		}
		return nil
	})
	testwait.For(t, 30*time.Second, func() error {
		n, err := metric(sp.url("/metrics"), `nave_spoke_gateway_credential_refusals_total{reason="no_reference_grant"}`)
		if err == nil && n < 1 {
			err = fmt.Errorf("refusals{no_reference_grant} = %v", n)
		}
		return err
	})

	// Rotation: a new certificate in the Secret reaches the open stream.
	rotated, rotatedLeaf := tlsSecret("edge", "web-cert", "web.example.com", ca)
	if _, err := cs.CoreV1().Secrets("edge").Update(ctx, rotated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sds.until("the rotated web-cert", func(s map[string]*tlsv3.Secret) bool {
		return s["web-cert"] != nil && servedLeaf(t, s["web-cert"]).Equal(rotatedLeaf)
	})
	// (On the same stream: an agent restart would have ended it.)

	// A ReferenceGrant in certs for Gateways of edge: now served.
	c.Apply(t, []byte(`apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: edge-gateways, namespace: certs}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: edge}]
  to: [{group: "", kind: Secret, name: shared}]
`))
	_, got = sds.until(crossNS, func(s map[string]*tlsv3.Secret) bool { return s[crossNS] != nil })
	if leaf := servedLeaf(t, got[crossNS]); !leaf.Equal(sharedLeaf) {
		t.Errorf("%s serves %s; want the generic Secret's certificate", crossNS, leaf.Subject)
	}
	if got["web-cert"] == nil {
		t.Error("web-cert is no longer served")
	}
}
