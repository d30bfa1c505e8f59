package gatewaycert

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
)

// serverWorld: namespace edge with service accounts gw (Istio's Role to
// list Secrets) and nobody (none), namespace other; no ReferenceGrant API.
const serverWorld = `apiVersion: v1
kind: Namespace
metadata: {name: edge}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: gw-credentials, namespace: edge}
rules: [{apiGroups: [""], resources: [secrets], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: gw-credentials, namespace: edge}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: gw-credentials}
subjects: [{kind: ServiceAccount, name: gw, namespace: edge}]
`

// startServer serves a Server on the API server c; a stream's identity
// is its "x-identity: namespace/serviceAccount" metadata (none:
// unauthenticated).
func startServer(t *testing.T, c *kubetest.Cluster) (*Server, secretv3.SecretDiscoveryServiceClient) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Client: cs, Dynamic: dyn, Authenticate: func(ctx context.Context) (string, string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-identity"); len(v) == 1 {
			ns, sa, _ := strings.Cut(v[0], "/")
			return ns, sa, nil
		}
		return "", "", status.Error(codes.Unauthenticated, "no token")
	}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return srv, secretv3.NewSecretDiscoveryServiceClient(conn)
}

// open starts a stream as identity asking for names and returns its
// responses.
func open(t *testing.T, client secretv3.SecretDiscoveryServiceClient, identity string, names ...string) <-chan map[string]*tlsv3.Secret {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-identity", identity))
	t.Cleanup(cancel)
	st, err := client.StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	out := make(chan map[string]*tlsv3.Secret, 16)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			m := map[string]*tlsv3.Secret{}
			for _, a := range resp.GetResources() {
				s := &tlsv3.Secret{}
				if a.UnmarshalTo(s) == nil {
					m[s.GetName()] = s
				}
			}
			out <- m
		}
	}()
	return out
}

// reasons are the refusals Status shows for identity's stream, by name.
func reasons(srv *Server, identity string) map[string]string {
	out := map[string]string{}
	for _, st := range srv.Status().Streams {
		if st.Identity != identity {
			continue
		}
		for _, n := range st.Names {
			if !n.Served {
				out[n.Name] = string(n.Reason) + ": " + n.Message
			}
		}
	}
	return out
}

// TestServerRefusesWithReasons: against a real API server, each name the
// spoke cannot serve is left out and shown with its reason, while the
// rest is served; a CA bundle needs no Role, a key does.
func TestServerRefusesWithReasons(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	c.Apply(t, []byte(serverWorld))
	cert, key, ca := secretData(t)
	c.Apply(t, []byte(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: good, namespace: edge}
type: kubernetes.io/tls
stringData:
  tls.crt: %q
  tls.key: %q
  ca.crt: %q
---
apiVersion: v1
kind: Secret
metadata: {name: bad, namespace: edge}
stringData: {password: hunter2}
---
apiVersion: v1
kind: Secret
metadata: {name: x, namespace: other}
stringData: {password: hunter2}
`, cert, key, ca)))
	srv, client := startServer(t, c)

	gw := open(t, client, "edge/gw", "good", "bad", "missing", "kubernetes://other/x", "kubernetes-gateway://other/x", "configmap://edge/ca")
	want := map[string]string{
		"bad":                          "wrong_shape: Secret edge/bad: no certificate",
		"missing":                      "not_found: Secret edge/missing does not exist",
		"kubernetes://other/x":         "unauthorized: ",
		"kubernetes-gateway://other/x": "no_reference_grant: the ReferenceGrants of namespace other cannot be read",
		"configmap://edge/ca":          "bad_name: ",
	}
	testwait.For(t, 30*time.Second, func() error {
		got := reasons(srv, "edge/gw")
		for name, prefix := range want {
			if !strings.HasPrefix(got[name], prefix) {
				return fmt.Errorf("%s: refused %q, want %q…", name, got[name], prefix)
			}
		}
		if len(got) != len(want) {
			return fmt.Errorf("refused %v, want exactly %v", got, want)
		}
		return nil
	})
	served := receive(t, gw, "good", func(m map[string]*tlsv3.Secret) bool { return m["good"] != nil })
	if len(served) != 1 || string(served["good"].GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != string(key) {
		t.Errorf("served %v; want good alone, with its key", served)
	}
	for _, why := range reasons(srv, "edge/gw") {
		if strings.Contains(why, "hunter2") {
			t.Errorf("a refusal quotes a Secret's value: %s", why)
		}
	}

	// Without Istio's Role: no key, but the CA bundle (good's ca.crt).
	nobody := open(t, client, "edge/nobody", "good", "good-cacert")
	cas := receive(t, nobody, "good-cacert", func(m map[string]*tlsv3.Secret) bool { return m["good-cacert"] != nil })
	if cas["good"] != nil || string(cas["good-cacert"].GetValidationContext().GetTrustedCa().GetInlineBytes()) != string(ca) {
		t.Errorf("served %v to a service account without the Role; want good-cacert alone", cas)
	}
	testwait.For(t, 30*time.Second, func() error {
		if why := reasons(srv, "edge/nobody")["good"]; !strings.HasPrefix(why, "unauthorized: service account edge/nobody may not list secrets") {
			return fmt.Errorf("good: %q", why)
		}
		return nil
	})

	// No identity: the stream is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := client.StreamSecrets(ctx)
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("a stream without a token: %v, want Unauthenticated", err)
	}
	refusals := srv.Status().Refusals
	for _, r := range []Reason{ReasonUnauthenticated, ReasonWrongShape, ReasonNotFound, ReasonUnauthorized, ReasonNoReferenceGrant, ReasonBadName} {
		if refusals[r] == 0 {
			t.Errorf("refusals %v: none counted for %s", refusals, r)
		}
	}
}

// receive waits for a response satisfying ok.
func receive(t *testing.T, ch <-chan map[string]*tlsv3.Secret, what string, ok func(map[string]*tlsv3.Secret) bool) map[string]*tlsv3.Secret {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-ch:
			if ok(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no response with %s within 30s", what)
		}
	}
}
