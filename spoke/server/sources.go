package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/kubeconfig"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/spoke/source/files"
	"github.com/navemesh/nave/spoke/source/kube"
	"github.com/navemesh/nave/spoke/spokeconfig"
)

// source is what the spoke reads its cluster from.
type source interface {
	Run(ctx context.Context, publish func([]*meshconfig.Object)) error
	Objects() []*meshconfig.Object
}

// newSource builds the configured source and where the hub's Gateway API
// statuses go (written to the cluster, or logged), and registers their
// ready check and debug views. The kubernetes source calls listed once
// its initial lists are in, before its first build.
func newSource(cfg spokeconfig.Config, log *slog.Logger, reg prometheus.Registerer, adm *admin.Server, listed func()) (source, gatewayStatuses, error) {
	if cfg.IsKubernetes() {
		rc, err := kubeconfig.Load(cfg.Kube.Kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("kubernetes.kubeconfig: %w", err)
		}
		src, err := kube.New(rc, kube.Options{
			DomainSuffix:      cfg.DomainSuffix,
			Network:           cfg.Network,
			NamespaceSelector: cfg.Kube.NamespaceSelector,
			Debounce:          cfg.Kube.Debounce,
			DebounceEdge:      cfg.Kube.DebounceEdge,
			CRDPoll:           cfg.Kube.CRDPoll,
			OnSynced:          listed,
			Logger:            log.With("component", "kube"),
			Registerer:        reg,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("source kubernetes: %w", err)
		}
		w, err := kube.NewStatusWriter(rc, kube.StatusWriterOptions{Logger: log.With("component", "gatewayapi-status"), Registerer: reg})
		if err != nil {
			return nil, nil, err
		}
		adm.AddReadyCheck("source", src.Ready)
		adm.HandleDebug("kinds", "every watched kind: synced, objects, and the last error (forbidden, CRD missing)", func(*http.Request) (any, error) {
			return src.Status(), nil
		})
		return src, newGatewayWriter(w, adm), nil
	}
	src, err := files.New(cfg.SourcePath(), files.Options{Debounce: cfg.Files.Debounce, DebounceEdge: cfg.Files.DebounceEdge, MaxFileBytes: cfg.Files.MaxFileBytes,
		Network: cfg.Network},
		log.With("component", "files"), reg)
	if err != nil {
		return nil, nil, fmt.Errorf("source %s: %w", cfg.Source, err)
	}
	adm.AddReadyCheck("source", func() error {
		if !src.Loaded() {
			return errors.New("source " + cfg.Source + " not loaded yet")
		}
		return nil
	})
	adm.HandleDebug("rejected", "objects and files the source skipped, with file, document index and reason", func(*http.Request) (any, error) {
		return src.Rejections(), nil
	})
	return src, newStatusLog(log.With("component", "gatewayapi-status"), adm), nil
}
