package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/spoke/source/kube"
)

// gatewayStatuses is where the hub's Gateway API statuses for this
// cluster go: the full current set at each change, from the remote
// view's OnGatewayAPIStatus callback (spoke/remote).
type gatewayStatuses interface {
	SetStatuses(statuses []*meshconfigv1.GatewayAPIStatus)
	// SetObjects takes each publish of the source (the objects' versions).
	SetObjects(objs []*meshconfig.Object)
	// Run drives it until ctx ends.
	Run(ctx context.Context) error
}

// newGatewayWriter returns the status writer of a Kubernetes spoke, which
// writes the statuses to its cluster, and serves its results at
// /debug/gatewayapi-status.
func newGatewayWriter(w *kube.StatusWriter, adm *admin.Server) gatewayStatuses {
	adm.HandleDebug("gatewayapi-status", "the Gateway API statuses the hub concluded for this cluster's objects and what the writer did with each: written, unchanged, stale (computed from another version of the object), not found, failed", func(*http.Request) (any, error) {
		return w.Results(), nil
	})
	return w
}

// statusLog keeps the statuses of a spoke that has nowhere to write them
// (the files source): it logs each new set and serves it at
// /debug/gatewayapi-status. It is safe for concurrent use.
type statusLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last []*meshconfigv1.GatewayAPIStatus
}

func newStatusLog(log *slog.Logger, adm *admin.Server) *statusLog {
	l := &statusLog{log: log}
	adm.HandleDebug("gatewayapi-status", "the Gateway API statuses the hub concluded for this cluster's objects (a files source has no API server to write them to)", func(*http.Request) (any, error) {
		type status struct {
			Kind      string          `json:"kind"`
			Namespace string          `json:"namespace"`
			Name      string          `json:"name"`
			Version   string          `json:"version"`
			Status    json.RawMessage `json:"status"`
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		out := []status{}
		for _, s := range l.last {
			out = append(out, status{s.GetKind(), s.GetNamespace(), s.GetName(), s.GetVersion(), json.RawMessage(s.GetJson())})
		}
		return out, nil
	})
	return l
}

func (l *statusLog) SetStatuses(statuses []*meshconfigv1.GatewayAPIStatus) {
	l.mu.Lock()
	l.last = statuses
	l.mu.Unlock()
	l.log.Info("gateway API statuses received; the files source has nowhere to write them (see /debug/gatewayapi-status)", "statuses", len(statuses))
}

func (l *statusLog) SetObjects([]*meshconfig.Object) {}

func (l *statusLog) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
