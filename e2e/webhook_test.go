package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/testwait"
)

const (
	webhookConfigName = "nave-spoke-validation"
	webhookCASecret   = "nave-spoke-webhook-ca"
	webhookDenied     = `admission webhook "validation.nave.io" denied the request: `
)

var vsResource = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}

// webhookManifest is deploy/spoke/webhook.yaml as shipped, with every
// webhook's clientConfig pointed at https://127.0.0.1:port/validate: the
// API server calls a spoke process on loopback instead of a Service.
func webhookManifest(t *testing.T, port int) []byte {
	t.Helper()
	return shippedWebhooks(t, "webhook.yaml", port)
}

// webhookSpoke is a nave-spoke process watching a cluster and serving the
// validation webhook on loopback. It has no hub: the webhook does not
// need one.
type webhookSpoke struct {
	name          string
	admin, server int
	args          []string
	proc          *harness.Proc
}

func newWebhookSpoke(t *testing.T, kc *kubetest.Cluster, name string, extra ...string) *webhookSpoke {
	t.Helper()
	s := &webhookSpoke{name: name, admin: harness.FreePort(t), server: harness.FreePort(t)}
	s.args = append([]string{"--source", "kubernetes", "--kubernetes.kubeconfig", kc.Kubeconfig(t, spokeIdentity, "system:serviceaccounts", "system:serviceaccounts:nave-system"),
		"--cluster", name, "--hub.address", addr(harness.FreePort(t)), "--hub.plaintext", "--hub.state-dir", t.TempDir(), "--admin.listen", addr(s.admin),
		"--webhook.listen", addr(s.server), "--webhook.hosts", "127.0.0.1", "--log.level", "debug"}, extra...)
	return s
}

func (s *webhookSpoke) start(t *testing.T) {
	t.Helper()
	s.proc = harness.Start(t, "spoke-"+s.name, binary("nave-spoke"), s.args...)
}

func (s *webhookSpoke) waitReady(t *testing.T) {
	t.Helper()
	harness.WaitReady(t, "http://"+addr(s.admin)+"/healthz/ready", 60*time.Second)
}

// webhookStatus is what /debug/webhook shows.
type webhookStatus struct {
	Authorities []struct {
		Generation int `json:"generation"`
	} `json:"authorities"`
	Serving *struct {
		Serial       string `json:"serial"`
		CAGeneration int    `json:"caGeneration"`
	} `json:"serving"`
}

func (s *webhookSpoke) status(t *testing.T) webhookStatus {
	t.Helper()
	var st webhookStatus
	if err := harness.GetJSON("http://"+addr(s.admin)+"/debug/webhook", &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// servingCert is the certificate the spoke's webhook listener presents.
func (s *webhookSpoke) servingCert(t *testing.T) *x509.Certificate {
	t.Helper()
	// Not verified here: the caller verifies it against the caBundle.
	c, err := tls.Dial("tcp", addr(s.server), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

// warnings collects the API server's warnings of a client.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// istioWriter creates Istio objects as the cluster's admin would.
type istioWriter struct {
	dyn  dynamic.Interface
	warn *warnings
}

func newIstioWriter(t *testing.T, kc *kubetest.Cluster) *istioWriter {
	cfg := rest.CopyConfig(kc.Admin)
	w := &istioWriter{warn: &warnings{}}
	cfg.WarningHandler = w.warn
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.dyn = dyn
	return w
}

// create creates the VirtualService given as YAML (dry run: validated,
// not stored) and returns the API server's warnings.
func (w *istioWriter) create(t *testing.T, doc string, dryRun bool) ([]string, error) {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
		t.Fatal(err)
	}
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	w.warn.take()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := w.dyn.Resource(vsResource).Namespace(obj.GetNamespace()).Create(ctx, obj, opts)
	return w.warn.take(), err
}

// badVS's weights sum to 90.
func badVS(name string) string {
	return `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ` + name + `, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - route:
    - {destination: {host: reviews, subset: v1}, weight: 80}
    - {destination: {host: reviews, subset: v2}, weight: 10}
`
}

const badVSDenial = webhookDenied + "VirtualService shop/%s: spec.http[0].route: weights sum to 90, want 100"

// expectDenied creates badVS(name) and wants the webhook's denial naming
// the field.
func (w *istioWriter) expectDenied(t *testing.T, name string, dryRun bool) error {
	t.Helper()
	_, err := w.create(t, badVS(name), dryRun)
	want := fmt.Sprintf(badVSDenial, name)
	if err == nil || !strings.Contains(err.Error(), want) {
		return fmt.Errorf("create of an invalid VirtualService: %v, want %q", err, want)
	}
	return nil
}

// bundlePool is the caBundle of the registered webhook as the API server
// stores it.
func bundlePool(t *testing.T, cs kubernetes.Interface) (*x509.CertPool, string) {
	t.Helper()
	cfg, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), webhookConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.Webhooks[0].ClientConfig.CABundle)
	return pool, cfg.ResourceVersion
}

// TestValidationWebhook runs the real nave-spoke binary as the validation
// webhook of a real kube-apiserver, registered by deploy/spoke/webhook.yaml
// (its clientConfig rewritten to a loopback URL), with the RBAC of
// deploy/spoke/rbac.yaml. Two spokes racing at startup share one CA whose
// caBundle verifies both; the API server refuses an invalid VirtualService
// with the field named and admits a valid one routing to an undefined
// subset with a warning; a restart and CA and certificate rotations keep
// the webhook answering.
func TestValidationWebhook(t *testing.T) {
	kc := kubeCluster(t)
	kc.Apply(t, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n"))
	admin := kubernetes.NewForConfigOrDie(kc.Admin)
	w := newIstioWriter(t, kc)
	a, b := newWebhookSpoke(t, kc, "cluster-a"), newWebhookSpoke(t, kc, "cluster-b")
	kc.Apply(t, webhookManifest(t, a.server))
	top := t // the spokes outlive the subtest that starts them

	t.Run("two spokes racing at startup share one CA that verifies both", func(t *testing.T) {
		a.start(top)
		b.start(top)
		a.waitReady(t)
		b.waitReady(t)
		sec, err := admin.CoreV1().Secrets("nave-system").Get(t.Context(), webhookCASecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(sec.Data) != 2 || sec.Data["ca-1.crt"] == nil || sec.Data["ca-1.key"] == nil {
			t.Fatalf("CA Secret holds %d keys, want exactly ca-1.crt and ca-1.key", len(sec.Data))
		}
		created := 0.0
		for _, s := range []*webhookSpoke{a, b} {
			n, err := metric("http://"+addr(s.admin)+"/metrics", "nave_spoke_webhook_cas_created_total")
			if err != nil {
				t.Fatal(err)
			}
			created += n
		}
		if created != 1 {
			t.Errorf("the two spokes created %v CAs between them, want 1", created)
		}
		testwait.For(t, 20*time.Second, func() error {
			pool, _ := bundlePool(t, admin)
			for _, s := range []*webhookSpoke{a, b} {
				if _, err := s.servingCert(t).Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
					return fmt.Errorf("%s's serving certificate against the caBundle: %w", s.name, err)
				}
			}
			return nil
		})
		// The API server calls each in turn.
		for _, s := range []*webhookSpoke{b, a} {
			kc.Apply(t, webhookManifest(t, s.server))
			testwait.For(t, 20*time.Second, func() error { return w.expectDenied(t, "via-"+s.name, true) })
		}
	})

	t.Run("an invalid VirtualService is refused naming the field", func(t *testing.T) {
		if err := w.expectDenied(t, "bad", false); err != nil {
			t.Fatal(err)
		}
		if _, err := w.dyn.Resource(vsResource).Namespace("shop").Get(t.Context(), "bad", metav1.GetOptions{}); err == nil {
			t.Error("the refused VirtualService was stored")
		}
	})

	t.Run("an EnvoyFilter nave refuses and a WasmPlugin are denied with the reason", func(t *testing.T) {
		for _, tc := range []struct {
			gvr       schema.GroupVersionResource
			doc, want string
		}{
			{schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"},
				"apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: ef, namespace: shop}\n" +
					"spec: {configPatches: [{applyTo: LISTENER, patch: {operation: REPLACE, value: {name: x}}}]}\n",
				webhookDenied + "EnvoyFilter shop/ef: spec.configPatches[0].patch.operation: operation REPLACE is not supported for applyTo LISTENER"},
			{schema.GroupVersionResource{Group: "extensions.istio.io", Version: "v1alpha1", Resource: "wasmplugins"},
				"apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: wp, namespace: shop}\nspec: {url: 'oci://example.com/x:1'}\n",
				"WasmPlugin is not supported: nave's agent does not fetch Wasm modules"},
		} {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(tc.doc), &obj.Object); err != nil {
				t.Fatal(err)
			}
			_, err := w.dyn.Resource(tc.gvr).Namespace("shop").Create(t.Context(), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create %s: %v, want a denial containing %q", tc.gvr.Resource, err, tc.want)
			}
		}
	})

	t.Run("a valid VirtualService to an undefined subset is admitted with a warning", func(t *testing.T) {
		kc.Apply(t, []byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  subsets: [{name: v1, labels: {version: v1}}]
`))
		good := strings.Replace(badVS("reviews"), "weight: 80", "weight: 90", 1)
		want := `spec.http[0].route[1].destination.subset: subset "v2" is not defined by the DestinationRules of reviews.shop.svc.cluster.local in this cluster (shop/reviews: subsets v1)`
		// The spoke learns of the DestinationRule through its watch.
		var warned []string
		testwait.For(t, 20*time.Second, func() error {
			var err error
			if warned, err = w.create(t, good, true); err != nil {
				return err
			}
			if len(warned) != 1 || warned[0] != want {
				return fmt.Errorf("warnings %q, want [%q]", warned, want)
			}
			return nil
		})
		if warned, err := w.create(t, good, false); err != nil || len(warned) != 1 {
			t.Fatalf("create: %v, warnings %q", err, warned)
		}
		if _, err := w.dyn.Resource(vsResource).Namespace("shop").Get(t.Context(), "reviews", metav1.GetOptions{}); err != nil {
			t.Errorf("the admitted VirtualService is not stored: %v", err)
		}
	})

	t.Run("a restarted spoke keeps the webhook working", func(t *testing.T) {
		_, before := bundlePool(t, admin)
		b.proc.Stop(5 * time.Second)
		a.proc.Stop(5 * time.Second)
		// failurePolicy Fail: with no spoke, nothing unchecked gets in.
		if _, err := w.create(t, badVS("while-down"), true); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			t.Fatalf("with the spoke down: %v, want the call to fail", err)
		}
		a.start(t)
		a.waitReady(t)
		if err := w.expectDenied(t, "after-restart", true); err != nil {
			t.Fatal(err)
		}
		if _, after := bundlePool(t, admin); after != before {
			t.Errorf("the restart rewrote the webhook configuration (resourceVersion %s → %s)", before, after)
		}
		a.proc.Stop(5 * time.Second)
	})

	t.Run("rotations keep the webhook working", func(t *testing.T) {
		// A new CA that lives 10 s (a successor every 5.5 s) and serving
		// certificates that live 2 s.
		if err := admin.CoreV1().Secrets("nave-system").Delete(t.Context(), webhookCASecret, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		r := newWebhookSpoke(t, kc, "cluster-r", "--webhook.cert-validity", "2s", "--webhook.ca-validity", "10s")
		kc.Apply(t, webhookManifest(t, r.server))
		r.start(t)
		r.waitReady(t)
		testwait.For(t, 20*time.Second, func() error { return w.expectDenied(t, "rotating", true) })
		serials, gens := map[string]bool{}, map[int]bool{}
		calls := 0
		for end := time.Now().Add(25 * time.Second); time.Now().Before(end); calls++ {
			if err := w.expectDenied(t, "rotating", true); err != nil {
				st := r.status(t)
				t.Fatalf("call %d: %v (serving %+v, CAs %+v)", calls, err, st.Serving, st.Authorities)
			}
			st := r.status(t)
			serials[st.Serving.Serial] = true
			gens[st.Serving.CAGeneration] = true
			time.Sleep(50 * time.Millisecond)
		}
		if len(gens) < 3 || len(serials) < 8 {
			t.Errorf("%d calls saw %d CA generations and %d serving certificates, want at least 3 and 8", calls, len(gens), len(serials))
		}
		t.Logf("%d calls, all answered by the webhook, across %d CA generations and %d serving certificates", calls, len(gens), len(serials))
	})
}

// TestWebhookListenerSurvivesGarbage sends the running webhook what is not
// TLS and bodies that are not reviews: it answers each with an error and
// goes on validating for the API server.
func TestWebhookListenerSurvivesGarbage(t *testing.T) {
	kc := kubeCluster(t)
	kc.Apply(t, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n"))
	s := newWebhookSpoke(t, kc, "cluster-g", "--webhook.max-request-bytes", "65536")
	kc.Apply(t, webhookManifest(t, s.server))
	s.start(t)
	s.waitReady(t)
	w := newIstioWriter(t, kc)
	testwait.For(t, 20*time.Second, func() error { return w.expectDenied(t, "before", true) })

	c, err := net.Dial("tcp", addr(s.server))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	c.Close()
	pool, _ := bundlePool(t, kubernetes.NewForConfigOrDie(kc.Admin))
	for _, tc := range []struct {
		contentType, body string
		status            int
		want              string
	}{
		{"application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":{"kind":`, 400, "truncated"},
		{"text/plain", `{}`, 415, "want application/json"},
		{"application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, 400, "admissionReviewVersions [v1]"},
		{"application/json", strings.Repeat(" ", 70000), 413, "webhook.maxRequestBytes"},
	} {
		code, body := postTLS(t, pool, "https://"+addr(s.server)+"/validate", tc.contentType, tc.body)
		if code != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%.40q: %d %q, want %d and %q", tc.body, code, body, tc.status, tc.want)
		}
	}
	if err := w.expectDenied(t, "after", true); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.proc.Log(), "panic") {
		t.Error("the spoke's log shows a panic")
	}
	assertMetricsDocumented(t, "http://"+addr(s.admin)+"/metrics")
}

// postTLS posts body to url, trusting pool, and returns the status and
// the answer.
func postTLS(t *testing.T, pool *x509.CertPool, url, contentType, body string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(url, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
