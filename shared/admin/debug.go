package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
)

// HandleDebug serves fn's result as indented JSON on /debug/<name> and lists the view with its
// description on /debug/. An error from fn is answered with status 500 and {"error": "..."}.
// name is one lowercase path segment (letters, digits, '-', '_', '.'), not "pprof"; an invalid
// or already registered name panics, as http.ServeMux does for a pattern: both are mistakes in
// the program.
func (s *Server) HandleDebug(name, description string, fn func(r *http.Request) (any, error)) {
	if !debugName.MatchString(name) || name == "pprof" {
		panic(fmt.Sprintf("admin: invalid debug view name %q", name))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.debug[name]; dup {
		panic(fmt.Sprintf("admin: debug view %q registered twice", name))
	}
	s.debug[name] = debugView{description: description, fn: fn}
}

// debugEntry is one line of the /debug/ index.
type debugEntry struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	Description string `json:"description"`
}

func (s *Server) serveDebugIndex(w http.ResponseWriter, r *http.Request) {
	scope, scoped := ScopeOf(r)
	all := !scoped || scope.Vendor // a tenant operator is shown what it may call
	s.mu.RLock()
	index := make([]debugEntry, 0, len(s.debug)+1)
	for name, view := range s.debug {
		if all || view.tenant {
			index = append(index, debugEntry{Name: name, Path: "/debug/" + name, Description: view.description})
		}
	}
	s.mu.RUnlock()
	if all {
		index = append(index, debugEntry{Name: "pprof", Path: "/debug/pprof/", Description: "Go runtime profiles (pprof)"})
	}
	sort.Slice(index, func(i, j int) bool { return index[i].Name < index[j].Name })
	s.writeJSON(w, http.StatusOK, index)
}

func (s *Server) serveDebug(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s.mu.RLock()
	view, ok := s.debug[name]
	s.mu.RUnlock()
	if !ok {
		s.writeJSON(w, http.StatusNotFound, errorBody{Error: fmt.Sprintf("no debug view %q; see /debug/", name)})
		return
	}
	result, err := view.fn(r)
	if err != nil {
		s.writeJSON(w, http.StatusInternalServerError, errorBody{Error: err.Error()})
		return
	}
	s.writeJSON(w, http.StatusOK, result)
}

type errorBody struct {
	Error string `json:"error"`
}

// writeJSON answers with v as indented JSON; a value that does not marshal becomes a 500.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.MarshalIndent(errorBody{Error: fmt.Sprintf("encoding response: %v", err)}, "", "  ")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if _, err := w.Write(append(body, '\n')); err != nil {
		s.logger.Debug("admin response not written", "error", err)
	}
}
