package webhookcert

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/testlog"
	"github.com/navemesh/nave/internal/testwait"
)

const (
	// spokeUser is the identity deploy/spoke/rbac.yaml grants.
	spokeUser  = "system:serviceaccount:nave-system:nave-spoke"
	namespace  = "nave-system"
	secretName = "nave-spoke-webhook-ca"
	configName = "nave-spoke-validation"
	// mutatingName is the injector's configuration.
	mutatingName = "nave-spoke-injection"
	wait         = 30 * time.Second
)

func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kube is a real API server with the spoke's namespace, RBAC and webhook
// configuration applied, as deploy/spoke ships them.
type kube struct {
	c     *kubetest.Cluster
	admin kubernetes.Interface
	spoke kubernetes.Interface
}

func startKube(t *testing.T) *kube {
	t.Helper()
	c := kubetest.Start(t, kubetest.Options{})
	c.Apply(t, repoFile(t, "deploy/spoke/namespace.yaml"), repoFile(t, "deploy/spoke/rbac.yaml"), repoFile(t, "deploy/spoke/webhook.yaml"),
		repoFile(t, "deploy/spoke/injection.yaml"))
	admin, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	spoke, err := kubernetes.NewForConfig(c.As(spokeUser, "system:serviceaccounts", "system:serviceaccounts:nave-system"))
	if err != nil {
		t.Fatal(err)
	}
	return &kube{c: c, admin: admin, spoke: spoke}
}

// replica is a running Manager.
type replica struct {
	m      *Manager
	log    *testlog.Buffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// stop ends Run and waits for it; calling it again does nothing.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func startReplica(t *testing.T, cs kubernetes.Interface, certValidity, caValidity time.Duration) *replica {
	t.Helper()
	log := &testlog.Buffer{}
	m, err := New(Options{
		Client: cs, Namespace: namespace, SecretName: secretName, ValidatingConfigurations: []string{configName},
		MutatingConfigurations: []string{mutatingName},
		Hosts:                  []string{"127.0.0.1", "nave-spoke.nave-system.svc"}, CertValidity: certValidity, CAValidity: caValidity,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{m: m, log: log, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() {
			t.Logf("replica log:\n%s", log.String())
		}
	})
	return r
}

// eventually waits until fn returns nil, naming what it waited for.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	testwait.For(t, wait, func() error {
		if err := fn(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

func (k *kube) config(t *testing.T) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	cfg, err := k.admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), configName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (k *kube) mutating(t *testing.T) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	cfg, err := k.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), mutatingName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (k *kube) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := k.admin.CoreV1().Secrets(namespace).Get(t.Context(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// trusts checks that the serving certificate r holds now verifies, for
// the names the API server calls, against the caBundle of every webhook of
// the configuration as the API server stores it afterwards.
func (k *kube) trusts(t *testing.T, r *replica) error {
	t.Helper()
	c, err := r.m.GetCertificate(nil)
	if err != nil {
		return err
	}
	at := time.Now()
	bundles := map[string][]byte{}
	for _, w := range k.config(t).Webhooks {
		bundles[w.Name] = w.ClientConfig.CABundle
	}
	for _, w := range k.mutating(t).Webhooks {
		bundles[w.Name] = w.ClientConfig.CABundle
	}
	if len(bundles) != 5 {
		return fmt.Errorf("%d webhooks in the two configurations, want 5", len(bundles))
	}
	for name, bundle := range bundles {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(bundle) {
			return fmt.Errorf("webhook %s has no caBundle", name)
		}
		for _, name := range []string{"127.0.0.1", "nave-spoke.nave-system.svc"} {
			if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: at}); err != nil {
				return fmt.Errorf("serving certificate %s (CA generation %d) for %s: %w", c.Leaf.SerialNumber.Text(16),
					r.m.Status().Serving.CAGeneration, name, err)
			}
		}
	}
	return nil
}

// TestReplicasRacingShareOneCA starts two replicas at once with no CA
// Secret: one CA results, in one Secret, and the configuration's
// caBundle verifies both replicas' certificates. A restarted replica
// keeps the CA, and the caBundle is not rewritten.
func TestReplicasRacingShareOneCA(t *testing.T) {
	k := startKube(t)
	a := startReplica(t, k.spoke, time.Hour, 24*time.Hour)
	b := startReplica(t, k.spoke, time.Hour, 24*time.Hour)
	for _, r := range []*replica{a, b} {
		eventually(t, "a replica trusted by the caBundle", func() error { return k.trusts(t, r) })
	}
	cas, maxGen, problems := parseAuthorities(k.secret(t).Data)
	if len(cas) != 1 || maxGen != 1 || len(problems) > 0 {
		t.Fatalf("Secret holds %d CAs (max generation %d, problems %v), want exactly one", len(cas), maxGen, problems)
	}
	cfg := k.config(t)
	if got := cfg.Annotations[GenerationAnnotation]; got != "1" {
		t.Errorf("annotation %s=%q, want 1", GenerationAnnotation, got)
	}
	if got := k.mutating(t).Annotations[GenerationAnnotation]; got != "1" {
		t.Errorf("the injector's configuration: annotation %s=%q, want 1", GenerationAnnotation, got)
	}
	if a.m.Status().Serving.Serial == b.m.Status().Serving.Serial {
		t.Error("both replicas serve the same certificate")
	}
	if err := a.m.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}

	a.stop(t)
	a2 := startReplica(t, k.spoke, time.Hour, 24*time.Hour)
	eventually(t, "the restarted replica trusted by the caBundle", func() error { return k.trusts(t, a2) })
	if after := k.config(t); after.ResourceVersion != cfg.ResourceVersion {
		t.Errorf("a restart rewrote the configuration (resourceVersion %s → %s)", cfg.ResourceVersion, after.ResourceVersion)
	}
	if got, _, _ := parseAuthorities(k.secret(t).Data); len(got) != 1 || string(got[0].cert.Raw) != string(cas[0].cert.Raw) {
		t.Error("a restart changed the CA")
	}
}

// TestRotationKeepsEveryCertificateTrusted runs two replicas whose CA
// lives 12 s and whose certificates live 2 s, for three CA lifetimes:
// every certificate either replica serves at any moment verifies against
// the caBundle the API server stores, while CAs and certificates turn
// over.
func TestRotationKeepsEveryCertificateTrusted(t *testing.T) {
	k := startKube(t)
	const certValidity, caValidity = 2 * time.Second, 12 * time.Second
	reps := []*replica{startReplica(t, k.spoke, certValidity, caValidity), startReplica(t, k.spoke, certValidity, caValidity)}
	for _, r := range reps {
		eventually(t, "a replica trusted by the caBundle", func() error { return k.trusts(t, r) })
	}
	serials := map[string]bool{}
	end := time.Now().Add(3 * caValidity)
	for time.Now().Before(end) {
		for i, r := range reps {
			if err := k.trusts(t, r); err != nil {
				t.Fatalf("replica %d: %v", i, err)
			}
			serials[r.m.Status().Serving.Serial] = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, maxGen, _ := parseAuthorities(k.secret(t).Data)
	if maxGen < 4 {
		t.Errorf("newest CA generation %d after three CA lifetimes, want at least 4", maxGen)
	}
	if len(serials) < 10 {
		t.Errorf("%d serving certificates seen, want at least 10", len(serials))
	}
	for _, w := range k.config(t).Webhooks {
		if n := strings.Count(string(w.ClientConfig.CABundle), "BEGIN CERTIFICATE"); n > 3 {
			t.Errorf("caBundle holds %d CAs: expired ones are not dropped", n)
		}
	}
}

// TestCABundleIsRestored: a caBundle someone emptied is put back, a
// Secret someone corrupted is replaced by a new CA, and so is a deleted
// one, which both replicas then share.
func TestCABundleIsRestored(t *testing.T) {
	k := startKube(t)
	r := startReplica(t, k.spoke, time.Hour, 24*time.Hour)
	eventually(t, "trusted", func() error { return k.trusts(t, r) })

	cfg := k.config(t)
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig.CABundle = nil
	}
	if _, err := k.admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(t.Context(), cfg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the emptied caBundle restored", func() error { return k.trusts(t, r) })

	sec := k.secret(t)
	sec.Data = map[string][]byte{"ca-1.crt": []byte("garbage"), "ca-1.key": []byte("garbage")}
	if _, err := k.admin.CoreV1().Secrets(namespace).Update(t.Context(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new CA after corruption", func() error {
		cas, _, _ := parseAuthorities(k.secret(t).Data)
		if len(cas) != 1 || cas[0].gen != 2 {
			return fmt.Errorf("the Secret holds %d valid CAs (%v)", len(cas), cas)
		}
		if st := r.m.Status(); st.Serving == nil || st.Serving.CAGeneration != 2 {
			return fmt.Errorf("serving %+v", st.Serving)
		}
		return k.trusts(t, r)
	})

	r2 := startReplica(t, k.spoke, time.Hour, 24*time.Hour)
	eventually(t, "the second replica trusted", func() error { return k.trusts(t, r2) })
	before := k.secret(t).Data["ca-2.crt"]
	if err := k.admin.CoreV1().Secrets(namespace).Delete(t.Context(), secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new CA after deletion, trusted for both replicas", func() error {
		sec, err := k.admin.CoreV1().Secrets(namespace).Get(t.Context(), secretName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cas, _, _ := parseAuthorities(sec.Data)
		if len(cas) != 1 || string(cas[0].certPEM) == string(before) || cas[0].gen < 3 {
			return fmt.Errorf("the Secret holds %d CAs, want one new one of generation 3 or more", len(cas))
		}
		for _, rep := range []*replica{r, r2} {
			if st := rep.m.Status(); st.Serving == nil || st.Serving.CAGeneration != cas[0].gen {
				return fmt.Errorf("a replica serves a certificate of CA generation %+v, the Secret's is %d", st.Serving, cas[0].gen)
			}
			if err := k.trusts(t, rep); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestMissingPermissionIsReported runs a Manager as a user RBAC grants
// nothing: it is not ready, and says why.
func TestMissingPermissionIsReported(t *testing.T) {
	k := startKube(t)
	cs, err := kubernetes.NewForConfig(k.c.As("nobody"))
	if err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, cs, time.Hour, 24*time.Hour)
	eventually(t, "a forbidden error", func() error {
		err := r.m.Ready()
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			return fmt.Errorf("Ready: %v", err)
		}
		return nil
	})
}

// TestConcurrentStatusAndCertificate reads a Manager from many goroutines
// while it works (for the race detector).
func TestConcurrentStatusAndCertificate(t *testing.T) {
	k := startKube(t)
	r := startReplica(t, k.spoke, time.Second, 4*time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
				_, _ = r.m.GetCertificate(nil)
				_ = r.m.Status()
				_ = r.m.Ready()
			}
		})
	}
	wg.Wait()
	eventually(t, "trusted", func() error { return k.trusts(t, r) })
}
