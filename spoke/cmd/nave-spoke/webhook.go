package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/kubeconfig"
	"github.com/navemesh/nave/spoke/admission"
	"github.com/navemesh/nave/spoke/spokeconfig"
	"github.com/navemesh/nave/spoke/webhookcert"
)

// webhook is the admission webhook server, its validation webhook and the
// manager of its certificate. It runs apart from the hub connection: a
// spoke that cannot reach its hub still validates (invariant 5).
type webhook struct {
	lis       net.Listener
	server    *admission.Server
	validator *admission.Validator
	certs     *webhookcert.Manager
	log       *slog.Logger
}

// newWebhook builds the webhook on lis and registers its ready check
// (a serving certificate) and its debug view.
func newWebhook(cfg spokeconfig.Config, lis net.Listener, adm *admin.Server, log *slog.Logger, reg prometheus.Registerer) (*webhook, error) {
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
	certs, err := webhookcert.New(webhookcert.Options{
		Client: cs, Namespace: cfg.Webhook.Namespace, SecretName: cfg.Webhook.CASecret, ValidatingConfigurations: configs,
		Hosts: cfg.Webhook.Hosts, CertValidity: cfg.Webhook.CertValidity, CAValidity: cfg.Webhook.CAValidity,
		Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	w := &webhook{
		lis:       lis,
		server:    admission.NewServer(admission.Options{MaxRequestBytes: cfg.Webhook.MaxRequestBytes, Logger: log, Registerer: reg}),
		validator: admission.NewValidator(cfg.DomainSuffix),
		certs:     certs,
		log:       log,
	}
	w.server.Handle(admission.ValidatePath, "validation", w.validator)
	adm.AddReadyCheck("webhook", certs.Ready)
	adm.HandleDebug("webhook", "the admission webhooks' certificates: the CAs of the CA Secret, this replica's serving certificate, "+
		"the state of each webhook configuration's caBundle, the last error", func(*http.Request) (any, error) {
		return certs.Status(), nil
	})
	return w, nil
}

// run serves until ctx ends.
func (w *webhook) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.certs.Run(gctx) })
	g.Go(func() error { return w.server.Serve(gctx, w.lis, w.certs.GetCertificate) })
	w.log.Info("admission webhooks serving", "listen", w.lis.Addr().String(), "validate", admission.ValidatePath)
	return g.Wait()
}
