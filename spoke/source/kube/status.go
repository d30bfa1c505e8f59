package kube

import (
	"slices"
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
)

// States of a watched kind, as KindStatus reports them.
const (
	StateNotStarted   = "not started"        // Run has not started
	StateDiscovering  = "discovering"        // waiting for discovery to say whether its CRD is installed
	StateNotInstalled = "not installed"      // its CRD is not installed; discovery is polled for it
	StateSyncing      = "syncing"            // its informer runs and has not listed yet
	StateForbidden    = "forbidden"          // listing it is forbidden; the informer keeps retrying
	StateNotFound     = "resource not found" // the API server does not serve it; the informer keeps retrying
	StateSynced       = "synced"             // its informer listed it: its objects are published
)

// KindStatus is one watched kind's state, shown at the spoke's
// /debug/kinds. It is a plain value.
type KindStatus struct {
	Kind     string `json:"kind"`     // "Service", "VirtualService"
	Resource string `json:"resource"` // "virtualservices.networking.istio.io"
	State    string `json:"state"`    // one of the State constants
	Synced   bool   `json:"synced"`
	// Objects counts the kind's cached objects in selected namespaces as
	// of the last build.
	Objects     int       `json:"objects"`
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	// Invalid lists the objects of the last build that failed validation
	// and were skipped (registry Services under Service, Workloads under
	// EndpointSlice), and every object of a Gateway API kind nave does not
	// implement.
	Invalid []meshconfig.Rejection `json:"invalid,omitempty"`
}

// Status returns every watched kind's state, in a fixed order: the
// Kubernetes kinds, the Istio kinds, then the Gateway API kinds (those nave
// does not implement last: their objects are all listed as invalid).
func (s *Source) Status() []KindStatus {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]KindStatus, 0, len(s.kinds))
	for _, w := range s.kinds {
		out = append(out, KindStatus{
			Kind:        w.def.name,
			Resource:    w.def.resource(),
			State:       w.state(s.started.Load(), s.discovered),
			Synced:      w.synced,
			Objects:     s.counts[w.def.name],
			LastError:   w.lastErr,
			LastErrorAt: w.lastErrAt,
			Invalid:     slices.Clone(s.rejected[w.def.name]),
		})
	}
	return out
}
