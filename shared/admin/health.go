package admin

import (
	"fmt"
	"net/http"
	"sort"
)

// AddReadyCheck adds a check to /healthz/ready: the server is ready while every check returns
// nil. Checks run on each probe, so they must be cheap and safe to call from any goroutine.
// Registering a name twice panics: it is a mistake in the program.
func (s *Server) AddReadyCheck(name string, fn func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.checks[name]; dup {
		panic(fmt.Sprintf("admin: ready check %q registered twice", name))
	}
	s.checks[name] = fn
}

// readiness is the body of /healthz/ready.
type readiness struct {
	Ready   bool          `json:"ready"`
	Failing []failedCheck `json:"failing,omitempty"`
}

type failedCheck struct {
	Check  string `json:"check"`
	Reason string `json:"reason"`
}

func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	s.mu.RLock()
	checks := make(map[string]func() error, len(s.checks))
	for name, fn := range s.checks {
		checks[name] = fn
	}
	s.mu.RUnlock()

	var body readiness
	for name, fn := range checks { // run outside the lock: a check may be slow
		if err := fn(); err != nil {
			body.Failing = append(body.Failing, failedCheck{Check: name, Reason: err.Error()})
		}
	}
	sort.Slice(body.Failing, func(i, j int) bool { return body.Failing[i].Check < body.Failing[j].Check })
	body.Ready = len(body.Failing) == 0
	status := http.StatusOK
	if !body.Ready {
		status = http.StatusServiceUnavailable
	}
	s.writeJSON(w, status, body)
}

func (s *Server) serveLive(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "live"})
}
