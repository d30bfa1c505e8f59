package webhookcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/navemesh/nave/shared/renewal"
	"github.com/navemesh/nave/shared/retry"
)

// GenerationAnnotation, on a webhook configuration, is the generation of
// the newest CA its caBundle holds.
const GenerationAnnotation = "nave.io/webhook-ca-generation"

// Retry and resync timing.
const (
	retryMin = 500 * time.Millisecond
	retryMax = 30 * time.Second
	resync   = time.Minute // look again even when nothing changed
	again    = 100 * time.Millisecond
)

// Options configure a Manager.
type Options struct {
	// Client reaches the cluster's API server as the spoke. Required.
	Client kubernetes.Interface
	// Namespace and SecretName name the CA Secret. Required.
	Namespace, SecretName string
	// ValidatingConfigurations are the names of the
	// ValidatingWebhookConfigurations whose caBundle the Manager keeps
	// current; a missing one is reported and waited for.
	ValidatingConfigurations []string
	// MutatingConfigurations are the same for
	// MutatingWebhookConfigurations (the sidecar injector's).
	MutatingConfigurations []string
	// Hosts are the DNS names and IP addresses the serving certificate is
	// valid for (the Service's name the API server calls). At least one.
	Hosts []string
	// CertValidity is the serving certificate's validity; it is renewed
	// after half of it. Required.
	CertValidity time.Duration
	// CAValidity is a new CA's validity; it gets a successor after half of
	// it. At least 4 × CertValidity.
	CAValidity time.Duration
	// Logger receives what the Manager does; nil discards it.
	Logger *slog.Logger
	// Registerer receives the nave_spoke_webhook_* certificate metrics;
	// nil registers nowhere.
	Registerer prometheus.Registerer
}

func (o *Options) check() error {
	switch {
	case o.Client == nil:
		return errors.New("webhookcert: no Kubernetes client")
	case o.Namespace == "" || o.SecretName == "":
		return errors.New("webhookcert: the CA Secret's namespace and name are required")
	case len(o.Hosts) == 0:
		return errors.New("webhookcert: the serving certificate needs at least one host")
	case o.CertValidity <= 0:
		return errors.New("webhookcert: the certificate validity must be positive")
	case o.CAValidity < 4*o.CertValidity:
		return fmt.Errorf("webhookcert: the CA validity (%s) must be at least 4 times the certificate validity (%s)", o.CAValidity, o.CertValidity)
	}
	return nil
}

// Manager obtains and rotates the serving certificate and keeps the CA
// Secret and the webhook configurations' caBundle current (see the package
// documentation). GetCertificate, Ready and Status are safe for concurrent
// use; call Run once.
type Manager struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	current atomic.Pointer[serving]
	kick    chan struct{}

	// Set by Run before its loop; read only by the loop.
	secrets cache.Store
	configs []*webhookConfig
	// written is the Secret this replica last wrote (or read after losing
	// a race), used until the informer delivers anything newer than
	// writtenOver, the resourceVersion the informer held then ("" for
	// none).
	written     *corev1.Secret
	writtenOver string

	mu     sync.Mutex
	status Status
}

// New checks opts and returns a Manager that does nothing until Run.
func New(opts Options) (*Manager, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{opts: opts, log: log, metrics: newMetrics(opts.Registerer), kick: make(chan struct{}, 1)}
	m.status.Secret = opts.Namespace + "/" + opts.SecretName
	return m, nil
}

// GetCertificate returns the current serving certificate, for
// tls.Config.GetCertificate; an error until the first is issued.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if s := m.current.Load(); s != nil {
		return &s.tls, nil
	}
	return nil, errors.New("no webhook serving certificate yet")
}

// Ready returns nil once a serving certificate was issued, and otherwise
// what the Manager waits for.
func (m *Manager) Ready() error {
	if m.current.Load() != nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.status.LastError != "" {
		return fmt.Errorf("no webhook serving certificate yet: %s", m.status.LastError)
	}
	return errors.New("no webhook serving certificate yet: waiting for the CA Secret " + m.status.Secret)
}

func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// nameSelector limits a list or watch to the object called name, which
// RBAC rules with resourceNames allow.
func nameSelector(name string) informers.SharedInformerOption {
	return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
}

// Run watches the CA Secret and the webhook configurations and keeps them,
// and the serving certificate, current until ctx ends. It returns nil when
// ctx ends; API errors are retried (and shown by Status and Ready).
func (m *Manager) Run(ctx context.Context) error {
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.poke() },
		UpdateFunc: func(any, any) { m.poke() },
		DeleteFunc: func(any) { m.poke() },
	}
	watchError := func(what string) cache.WatchErrorHandlerWithContext {
		return func(_ context.Context, _ *cache.Reflector, err error) {
			m.setError(fmt.Errorf("watching %s: %w", what, err))
		}
	}
	sf := informers.NewSharedInformerFactoryWithOptions(m.opts.Client, 0, informers.WithNamespace(m.opts.Namespace), nameSelector(m.opts.SecretName))
	si := sf.Core().V1().Secrets().Informer()
	if _, err := si.AddEventHandler(handler); err != nil {
		return fmt.Errorf("webhookcert: %w", err)
	}
	if err := si.SetWatchErrorHandlerWithContext(watchError("Secret " + m.status.Secret)); err != nil {
		return fmt.Errorf("webhookcert: %w", err)
	}
	m.secrets = si.GetStore()
	m.configs = nil
	factories := []informers.SharedInformerFactory{sf}
	for _, kc := range []struct {
		kind  string
		names []string
	}{{kindValidating, m.opts.ValidatingConfigurations}, {kindMutating, m.opts.MutatingConfigurations}} {
		for _, name := range kc.names {
			cf := informers.NewSharedInformerFactoryWithOptions(m.opts.Client, 0, nameSelector(name))
			ci := configInformer(cf, kc.kind)
			if _, err := ci.AddEventHandler(handler); err != nil {
				return fmt.Errorf("webhookcert: %w", err)
			}
			if err := ci.SetWatchErrorHandlerWithContext(watchError(kc.kind + " " + name)); err != nil {
				return fmt.Errorf("webhookcert: %w", err)
			}
			m.configs = append(m.configs, &webhookConfig{kind: kc.kind, name: name, inf: ci})
			factories = append(factories, cf)
		}
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	defer func() {
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	// The configurations' watches are not waited for: the certificate
	// does not depend on them, and a missing permission is reported.
	if !cache.WaitForCacheSync(ctx.Done(), si.HasSynced) {
		return nil
	}

	return renewal.NewLoop(func(ctx context.Context) (time.Time, error) {
		next, err := m.reconcile(ctx)
		if err == nil {
			m.setError(nil)
		}
		return next, err
	}, renewal.Options{
		Policy:  renewal.Policy{Retry: retry.Policy{Initial: retryMin, Max: retryMax, Multiplier: 2, Jitter: -1}},
		MaxWait: resync,
		Wake:    m.kick,
		Failed:  func(err error, _ time.Duration) { m.setError(err) },
	}).Run(ctx)
}

// setError records the last error (logging it when it changes), or clears it.
func (m *Manager) setError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.status.LastError = ""
		return
	}
	m.metrics.errors.Inc()
	if err.Error() != m.status.LastError {
		m.log.Warn("webhook certificate management failed; retrying", "err", err)
	}
	m.status.LastError, m.status.LastErrorAt = err.Error(), time.Now()
}

// secret returns the newest view of the CA Secret: what this replica
// wrote until the informer has caught up with it, then the informer's.
func (m *Manager) secret() *corev1.Secret {
	cached := m.cachedSecret()
	if m.written != nil && resourceVersion(cached) == m.writtenOver {
		return m.written
	}
	m.written = nil
	return cached
}

func (m *Manager) cachedSecret() *corev1.Secret {
	if obj, ok, _ := m.secrets.GetByKey(m.opts.Namespace + "/" + m.opts.SecretName); ok {
		return obj.(*corev1.Secret)
	}
	return nil
}

// remember makes s the view of the Secret until the informer catches up.
func (m *Manager) remember(s *corev1.Secret) {
	m.written, m.writtenOver = s, resourceVersion(m.cachedSecret())
}

func resourceVersion(s *corev1.Secret) string {
	if s == nil {
		return ""
	}
	return s.ResourceVersion
}

// reconcile makes one pass: the Secret holds a valid CA (creating or
// rotating it if due), the configurations hold the bundle, the serving
// certificate is signed by the right CA and not due. It returns when to
// look again.
func (m *Manager) reconcile(ctx context.Context) (time.Time, error) {
	now := time.Now()
	sec := m.secret()
	var err error
	if sec == nil {
		if sec, err = m.createSecret(ctx, now); err != nil || sec == nil {
			return now.Add(again), err
		}
	}
	cas, maxGen, problems := parseAuthorities(sec.Data)
	if needsSuccessor(cas, now) {
		if sec, err = m.rotate(ctx, sec, cas, maxGen, now); err != nil || sec == nil {
			return now.Add(again), err
		}
		cas, _, problems = parseAuthorities(sec.Data)
	}
	pemBundle, gen := bundle(cas, now)
	sig := signer(cas, now)

	published := true
	var configs []ConfigStatus
	var cerr error
	for _, c := range m.configs {
		st, holds, err := m.syncConfig(ctx, c, pemBundle, gen, sig)
		configs = append(configs, st)
		published = published && holds
		if err != nil && cerr == nil {
			cerr = err
		}
	}

	cur, err := m.renew(cas, sig, published, now)
	next, ok := nextChange(cas, now)
	if cur != nil && (!ok || cur.renewAt().Before(next)) {
		next = cur.renewAt()
	}
	if !ok && cur == nil {
		next = now.Add(resync)
	}
	m.setStatus(cas, sig, cur, configs, problems, now)
	if err != nil {
		return next, err
	}
	return next, cerr
}

// createSecret creates the Secret with a first CA. Losing the race to
// another replica is no error: the winner's Secret is returned.
func (m *Manager) createSecret(ctx context.Context, now time.Time) (*corev1.Secret, error) {
	ca, err := newAuthority(m.configGeneration()+1, m.opts.CAValidity, now)
	if err != nil {
		return nil, fmt.Errorf("making a CA: %w", err)
	}
	obj := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: m.opts.SecretName, Namespace: m.opts.Namespace, Labels: map[string]string{
			"app.kubernetes.io/name": "nave-spoke", "app.kubernetes.io/part-of": "nave", "app.kubernetes.io/component": "webhook-ca",
		}},
		Type: corev1.SecretTypeOpaque,
		Data: secretData([]*authority{ca}),
	}
	created, err := m.opts.Client.CoreV1().Secrets(m.opts.Namespace).Create(ctx, obj, metav1.CreateOptions{FieldManager: "nave-spoke"})
	switch {
	case apierrors.IsAlreadyExists(err):
		m.log.Debug("webhook CA Secret created by another replica", "secret", m.status.Secret)
		got, gerr := m.opts.Client.CoreV1().Secrets(m.opts.Namespace).Get(ctx, m.opts.SecretName, metav1.GetOptions{})
		if gerr != nil {
			return nil, fmt.Errorf("reading the CA Secret %s: %w", m.status.Secret, gerr)
		}
		m.remember(got)
		return got, nil
	case err != nil:
		return nil, fmt.Errorf("creating the CA Secret %s: %w", m.status.Secret, err)
	}
	m.remember(created)
	m.metrics.casCreated.Inc()
	m.log.Info("webhook CA created", "secret", m.status.Secret, "generation", ca.gen, "notAfter", ca.cert.NotAfter.UTC().Format(time.RFC3339))
	return created, nil
}

// rotate adds a successor CA to the Secret and drops the expired and
// unreadable ones, conditioned on the Secret not having changed since it
// was read; another replica's rotation wins the race and is returned.
func (m *Manager) rotate(ctx context.Context, sec *corev1.Secret, cas []*authority, maxGen int, now time.Time) (*corev1.Secret, error) {
	ca, err := newAuthority(max(maxGen, m.configGeneration())+1, m.opts.CAValidity, now)
	if err != nil {
		return nil, fmt.Errorf("making a CA: %w", err)
	}
	upd := sec.DeepCopy()
	upd.Data = secretData(append(valid(cas, now), ca))
	updated, err := m.opts.Client.CoreV1().Secrets(m.opts.Namespace).Update(ctx, upd, metav1.UpdateOptions{FieldManager: "nave-spoke"})
	switch {
	case apierrors.IsConflict(err):
		m.log.Debug("webhook CA Secret changed by another replica while rotating", "secret", m.status.Secret)
		got, gerr := m.opts.Client.CoreV1().Secrets(m.opts.Namespace).Get(ctx, m.opts.SecretName, metav1.GetOptions{})
		if gerr != nil {
			return nil, fmt.Errorf("reading the CA Secret %s: %w", m.status.Secret, gerr)
		}
		m.remember(got)
		return nil, nil // look again at the other's Secret
	case apierrors.IsNotFound(err):
		m.written = nil
		return nil, nil // deleted meanwhile: create it anew
	case err != nil:
		return nil, fmt.Errorf("rotating the CA in Secret %s: %w", m.status.Secret, err)
	}
	m.remember(updated)
	m.metrics.casCreated.Inc()
	m.log.Info("webhook CA rotated", "secret", m.status.Secret, "generation", ca.gen,
		"signsFrom", ca.signableAt().UTC().Format(time.RFC3339), "notAfter", ca.cert.NotAfter.UTC().Format(time.RFC3339))
	return updated, nil
}

// syncConfig makes the configuration c's caBundle pemBundle (for CA
// generation gen) unless it holds a newer one, and reports whether the
// bundle the API server has (after the update, if any) holds sig.
func (m *Manager) syncConfig(ctx context.Context, c *webhookConfig, pemBundle []byte, gen int, sig *authority) (ConfigStatus, bool, error) {
	st := ConfigStatus{Name: c.name, Kind: c.kind}
	if !c.inf.HasSynced() {
		st.State = "not synced: cannot watch it yet (see lastError)"
		return st, false, nil
	}
	obj, view, exists := c.get()
	if !exists {
		st.State = "not found: apply deploy/spoke"
		return st, true, nil
	}
	st.Generation = view.generation()
	if bundlesAre(view, pemBundle) {
		st.State = "current"
		return st, true, nil
	}
	if st.Generation > gen {
		st.State = "holds a newer CA than this replica has seen yet"
		return st, holds(view, sig), nil
	}
	n, err := updateBundle(ctx, m.opts.Client, obj, pemBundle, gen)
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		st.State = "changed meanwhile; looking again"
		m.poke()
		return st, holds(view, sig), nil
	case err != nil:
		st.State = "update failed"
		return st, holds(view, sig), fmt.Errorf("updating the caBundle of %s %s: %w", c.kind, c.name, err)
	}
	st.State, st.Generation = "updated", gen
	m.metrics.bundleUpdates.Inc()
	m.log.Info("webhook caBundle updated", "kind", c.kind, "configuration", c.name, "generation", gen, "webhooks", n)
	return st, true, nil
}

// configGeneration is the highest CA generation a configuration says it
// holds: a new CA takes a higher one, even when the Secret was deleted or
// its entries lost, so that no replica takes the configuration's bundle
// for newer than the new CA's.
func (m *Manager) configGeneration() int {
	gen := 0
	for _, c := range m.configs {
		if _, v, ok := c.get(); ok {
			gen = max(gen, v.generation())
		}
	}
	return gen
}

// bundlesAre reports whether every webhook of v has exactly pemBundle.
func bundlesAre(v configView, pemBundle []byte) bool {
	for _, b := range v.bundles {
		if string(b) != string(pemBundle) {
			return false
		}
	}
	return true
}

// holds reports whether every webhook of v trusts ca.
func holds(v configView, ca *authority) bool {
	if ca == nil {
		return false
	}
	for _, b := range v.bundles {
		if !bundleHolds(b, ca.cert) {
			return false
		}
	}
	return true
}

func bundleHolds(pemBundle []byte, cert *x509.Certificate) bool {
	for rest := pemBundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return false
		}
		if b.Type == "CERTIFICATE" && string(b.Bytes) == string(cert.Raw) {
			return true
		}
	}
}

// renew issues a serving certificate when none is held, it is half way
// through, its CA is gone or expired, or another CA signs now — that
// one only once every configuration's caBundle holds it (published);
// until then the current certificate's CA renews it.
func (m *Manager) renew(cas []*authority, sig *authority, published bool, now time.Time) (*serving, error) {
	cur := m.current.Load()
	if sig == nil {
		return cur, errors.New("the CA Secret holds no valid CA")
	}
	var curCA *authority
	if cur != nil {
		for _, a := range valid(cas, now) {
			if a.gen == cur.caGen && string(a.cert.Raw) == string(cur.caCert.Raw) {
				curCA = a
			}
		}
	}
	use := sig
	if !published && curCA != nil {
		use = curCA
	}
	if cur != nil && curCA != nil && cur.caGen == use.gen && now.Before(cur.renewAt()) {
		return cur, nil
	}
	s, err := issue(use, m.opts.Hosts, m.opts.CertValidity, now)
	if err != nil {
		return cur, fmt.Errorf("issuing the serving certificate: %w", err)
	}
	m.current.Store(s)
	m.metrics.issued.Inc()
	m.metrics.expiry.Set(float64(s.cert.NotAfter.Unix()))
	m.log.Info("webhook serving certificate issued", "serial", s.cert.SerialNumber.Text(16), "caGeneration", s.caGen,
		"hosts", m.opts.Hosts, "notAfter", s.cert.NotAfter.UTC().Format(time.RFC3339))
	return s, nil
}
