package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/kubeconfig"
	"github.com/navemesh/nave/spoke/admission"
	"github.com/navemesh/nave/spoke/inject"
	"github.com/navemesh/nave/spoke/spokeconfig"
	"github.com/navemesh/nave/spoke/webhookcert"
)

// webhook is the admission webhook server, its validation webhook, its
// sidecar injector (inject.enabled) and the manager of its certificate. It
// runs apart from the hub connection: a spoke that cannot reach its hub
// still validates and injects (invariant 5); the injector needs only the
// trust material the spoke got at enrollment.
type webhook struct {
	lis       net.Listener
	server    *admission.Server
	validator *admission.Validator
	certs     *webhookcert.Manager
	injects   bool
	log       *slog.Logger
}

// newWebhook builds the webhook on lis and registers its ready check
// (a serving certificate) and its debug view.
func newWebhook(cfg spokeconfig.Config, lis net.Listener, adm *admin.Server, log *slog.Logger, reg prometheus.Registerer,
	trust func() (inject.Trust, error), meshConfig func() *meshv1alpha1.MeshConfig, network func(namespace string) string) (*webhook, error) {
	rc, err := kubeconfig.Load(cfg.Kube.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes.kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	var configs []string
	if cfg.Webhook.ValidatingConfiguration != "" {
		configs = append(configs, cfg.Webhook.ValidatingConfiguration)
	}
	var mutating []string
	if cfg.Webhook.MutatingConfiguration != "" {
		mutating = append(mutating, cfg.Webhook.MutatingConfiguration)
	}
	certs, err := webhookcert.New(webhookcert.Options{
		Client: cs, Namespace: cfg.Webhook.Namespace, SecretName: cfg.Webhook.CASecret, ValidatingConfigurations: configs,
		MutatingConfigurations: mutating,
		Hosts:                  cfg.Webhook.Hosts, CertValidity: cfg.Webhook.CertValidity, CAValidity: cfg.Webhook.CAValidity,
		Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	w := &webhook{
		lis: lis,
		server: admission.NewServer(admission.Options{MaxRequestBytes: cfg.Webhook.MaxRequestBytes, Logger: log, Registerer: reg,
			Handshakes: adm.Handshakes()}),
		validator: admission.NewValidator(cfg.DomainSuffix),
		certs:     certs,
		log:       log,
	}
	w.server.Handle(admission.ValidatePath, "validation", w.validator)
	if cfg.Inject.Enabled {
		in, err := inject.New(inject.Options{
			Revision: cfg.Inject.Revision, SystemNamespace: cfg.Webhook.Namespace, Mesh: cfg.Mesh, Cluster: cfg.Cluster, DomainSuffix: cfg.DomainSuffix,
			ProxyImage: cfg.Inject.ProxyImage, PullPolicy: corev1.PullPolicy(cfg.Inject.PullPolicy), RAAddress: cfg.Inject.RAAddress,
			XDSAddress: cfg.Inject.XDSAddress, XDSServerName: cfg.Inject.XDSServerName, XDSFallbackAddress: cfg.Inject.XDSFallbackAddress, XDSReplicas: cfg.Inject.XDSReplicas, Trust: trust,
			MeshConfig: meshConfig, Network: network, KeepAppProbes: !cfg.Inject.RewriteAppProbes,
			Logger: log.With("webhook", "injection"), Registerer: reg,
		})
		if err != nil {
			return nil, err
		}
		if raLoopbackOnly(cfg) {
			log.Warn("injected pods are given an address of the registration authority, but ra.listen is loopback only: "+
				"pods will not get certificates; set ra.listen 0.0.0.0:15023", "ra.listen", cfg.RA.Listen, "inject.raAddress", cfg.Inject.RAAddress)
		}
		w.server.Handle(inject.Path, "injection", in)
		w.injects = true
		adm.HandleDebug("inject", "the sidecar injector: revision, proxy image, the addresses injected pods are given, "+
			"and why pods are refused now if they are (the spoke not enrolled yet)", func(*http.Request) (any, error) {
			return in.Status(), nil
		})
	}
	adm.AddReadyCheck("webhook", certs.Ready)
	adm.HandleDebug("webhook", "the admission webhooks' certificates: the CAs of the CA Secret, this replica's serving certificate, "+
		"the state of each webhook configuration's caBundle, the last error", func(*http.Request) (any, error) {
		return certs.Status(), nil
	})
	return w, nil
}

// raLoopbackOnly reports whether the registration authority listens on
// loopback only while injected pods are told to reach it elsewhere.
func raLoopbackOnly(cfg spokeconfig.Config) bool {
	if cfg.RA.Listen == "" {
		return true
	}
	lh, _, err := net.SplitHostPort(cfg.RA.Listen)
	if err != nil {
		return false
	}
	ph, _, err := net.SplitHostPort(cfg.Inject.RAAddress)
	if err != nil {
		return false
	}
	isLoopback := func(h string) bool {
		ip := net.ParseIP(h)
		return h == "localhost" || (ip != nil && ip.IsLoopback())
	}
	return isLoopback(lh) && !isLoopback(ph)
}

// run serves until ctx ends.
func (w *webhook) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.certs.Run(gctx) })
	g.Go(func() error { return w.server.Serve(gctx, w.lis, w.certs.GetCertificate) })
	inj := ""
	if w.injects {
		inj = inject.Path
	}
	w.log.Info("admission webhooks serving", "listen", w.lis.Addr().String(), "validate", admission.ValidatePath, "inject", inj)
	return g.Wait()
}
