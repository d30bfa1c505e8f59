package admin

import (
	"context"
	"net/http"
	"strings"
)

// Scope is what an authenticated operator may see: every mesh (the vendor
// running the hub) or one mesh (a tenant's operator). A plain value.
type Scope struct {
	// Operator names who asks (the certificate's identity), for logs.
	Operator string
	// Vendor sees every mesh, the views not scoped by mesh, metrics and
	// profiles.
	Vendor bool
	// Mesh is a tenant operator's mesh.
	Mesh string
}

// Allows reports whether the scope may see mesh's data.
func (s Scope) Allows(mesh string) bool { return s.Vendor || s.Mesh == mesh }

type scopeKey struct{}

// ScopeOf returns the scope of the operator making r; ok is false for a
// request that came on a listener without operator authentication (Serve:
// the plain admin server of a component that has no operator listener),
// which sees everything.
func ScopeOf(r *http.Request) (s Scope, ok bool) {
	s, ok = r.Context().Value(scopeKey{}).(Scope)
	return s, ok
}

// Visible reports whether the caller of r may see mesh's data.
func Visible(r *http.Request, mesh string) bool {
	s, ok := ScopeOf(r)
	return !ok || s.Allows(mesh)
}

// HandleTenantDebug is HandleDebug for a view that shows a tenant operator
// only its own mesh's data, by filtering with Visible itself. A view
// registered with HandleDebug is for the vendor's operators only (on an
// operator listener): a new view leaks nothing until it is made scoped.
func (s *Server) HandleTenantDebug(name, description string, fn func(r *http.Request) (any, error)) {
	s.HandleDebug(name, description, fn)
	s.mu.Lock()
	v := s.debug[name]
	v.tenant = true
	s.debug[name] = v
	s.mu.Unlock()
}

// OperatorAuthenticator decides the scope of the operator making r (its
// TLS client certificate, already verified by the listener), or refuses
// it with an error saying why.
type OperatorAuthenticator func(r *http.Request) (Scope, error)

// OperatorHandler serves every endpoint to authenticated operators, by
// scope: health for anyone authenticated; metrics, profiles and the
// vendor-only debug views for the vendor; the tenant debug views
// (HandleTenantDebug) to tenants too, which filter by mesh. Refusals are
// 401 (not authenticated) or 403 (not in scope) with a JSON reason.
func (s *Server) OperatorHandler(auth OperatorAuthenticator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope, err := auth(r)
		if err != nil {
			s.logger.Warn("admin request refused", "path", r.URL.Path, "peer", r.RemoteAddr, "reason", err.Error())
			s.writeJSON(w, http.StatusUnauthorized, errorBody{Error: "not authenticated as an operator: " + err.Error()})
			return
		}
		p := r.URL.Path
		vendorOnly := p == "/metrics" || strings.HasPrefix(p, "/debug/pprof/")
		if name, ok := strings.CutPrefix(p, "/debug/"); ok && !vendorOnly && name != "" {
			s.mu.RLock()
			v, known := s.debug[name]
			s.mu.RUnlock()
			vendorOnly = known && !v.tenant
		}
		if vendorOnly && !scope.Vendor {
			s.logger.Warn("admin request refused", "path", p, "operator", scope.Operator, "reason", "vendor only")
			s.writeJSON(w, http.StatusForbidden, errorBody{Error: p + " is for the vendor's operators only"})
			return
		}
		s.handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), scopeKey{}, scope)))
	})
}

// WorkloadHandler serves the probes, metrics and debug views but not Go's
// profiles: what a process inside a workload's pod (nave-agent) serves on
// the pod's IP, where the kubelet probes it, Prometheus scrapes it and any
// other pod of the cluster may reach it. Its views must describe only that
// workload.
func (s *Server) WorkloadHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz/", s.handler)
	mux.Handle("GET /metrics", s.handler)
	mux.HandleFunc("GET /debug/pprof/", http.NotFound)
	mux.Handle("GET /debug/", s.handler)
	return mux
}

// ProbeHandler serves only the health probes and metrics: what an admin
// listener serves to probes and Prometheus when the debug views are on an
// operator listener.
func (s *Server) ProbeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz/", s.handler)
	mux.Handle("GET /metrics", s.handler)
	return mux
}
