package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/shared/retry"
)

// firstDiscoveryRetry is the first delay before asking discovery again
// after it failed; the delay doubles up to the CRD poll period.
const firstDiscoveryRetry = 500 * time.Millisecond

// watchCRDs starts the informers of the CRD kinds once discovery shows
// their resources, and keeps polling discovery for those still missing
// every CRDPoll, until all run or ctx is done. Until discovery first
// answers, the initial publish waits; a kind discovery says is missing
// does not hold it up.
func (s *Source) watchCRDs(ctx context.Context, wg *sync.WaitGroup) {
	var pending []*watched
	for _, w := range s.kinds {
		if w.def.crd {
			pending = append(pending, w)
		}
	}
	firstWait := retry.Policy{Initial: firstDiscoveryRetry, Max: s.opts.CRDPoll, Multiplier: 2, Jitter: -1}.New()
	var lastMissing, lastErr string
	for len(pending) > 0 {
		found, missing, err := s.discover(ctx, pending)
		wait := s.opts.CRDPoll
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			msg := err.Error()
			s.mu.Lock()
			first := !s.discovered
			if first {
				s.discErr = msg
			}
			s.mu.Unlock()
			if msg != lastErr {
				s.logger.Warn("discovery of the CRD kinds failed; retrying", "err", err)
			}
			lastErr = msg
			if first {
				wait = firstWait.NextBackOff()
			}
		default:
			lastErr = ""
			for _, w := range found {
				if err := s.startKind(ctx, wg, w); err != nil {
					s.logger.Error("kind watch not started", "kind", w.def.name, "err", err)
				}
			}
			names := kindNames(missing)
			s.mu.Lock()
			for _, w := range missing {
				w.missing = true
			}
			for _, w := range found {
				w.missing = false
			}
			s.discovered, s.discErr = true, ""
			s.mu.Unlock()
			if names != lastMissing && names != "" {
				s.logger.Warn("CRD kinds not installed; watching for their CRDs", "kinds", names, "poll", s.opts.CRDPoll)
			}
			if len(found) > 0 && lastMissing != "" {
				s.logger.Info("CRD kinds installed; watching them", "kinds", kindNames(found))
			}
			lastMissing = names
			pending = missing
			s.poke()
		}
		if len(pending) == 0 {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// discover asks the API server which of the kinds' resources it serves.
func (s *Source) discover(ctx context.Context, kinds []*watched) (found, missing []*watched, err error) {
	byGV := map[string][]*watched{}
	var gvs []string
	for _, w := range kinds {
		gv := w.def.groupVersion()
		if _, ok := byGV[gv]; !ok {
			gvs = append(gvs, gv)
		}
		byGV[gv] = append(byGV[gv], w)
	}
	slices.Sort(gvs)
	for _, gv := range gvs {
		served, err := s.servedResources(ctx, gv)
		if err != nil {
			return nil, nil, err
		}
		for _, w := range byGV[gv] {
			if served[w.def.plural] {
				found = append(found, w)
			} else {
				missing = append(missing, w)
			}
		}
	}
	return found, missing, nil
}

// servedResources returns the resources the API server serves in a group
// version; none when it does not serve the group version at all.
func (s *Source) servedResources(ctx context.Context, gv string) (map[string]bool, error) {
	raw, err := s.kube.Discovery().RESTClient().Get().AbsPath("/apis", gv).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", gv, err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("discover %s: %w", gv, err)
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		if !strings.Contains(r.Name, "/") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
			served[r.Name] = true
		}
	}
	return served, nil
}

func kindNames(ws []*watched) string {
	names := make([]string, 0, len(ws))
	for _, w := range ws {
		names = append(names, w.def.name)
	}
	return strings.Join(names, ", ")
}
