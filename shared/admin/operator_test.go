package admin

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The operator handler: authentication first, then scope: tenants reach
// only the tenant views (which filter by Visible), the vendor everything.
func TestOperatorHandlerScopes(t *testing.T) {
	s := New(slog.New(slog.DiscardHandler), NewRegistry())
	s.HandleTenantDebug("things", "things by mesh", func(r *http.Request) (any, error) {
		out := []string{}
		for _, m := range []string{"acme", "globex"} {
			if Visible(r, m) {
				out = append(out, m)
			}
		}
		return out, nil
	})
	s.HandleDebug("secrets", "vendor only", func(*http.Request) (any, error) { return "all of them", nil })
	s.HandlePage("/status/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope, _ := ScopeOf(r)
		_, _ = io.WriteString(w, "status page for "+scope.Operator)
	}))
	// The test's authenticator: the header names the scope.
	auth := func(r *http.Request) (Scope, error) {
		switch who := r.Header.Get("Who"); who {
		case "vendor":
			return Scope{Operator: who, Vendor: true}, nil
		case "":
			return Scope{}, errors.New("no certificate")
		default:
			return Scope{Operator: who, Mesh: who}, nil
		}
	}
	ts := httptest.NewServer(s.OperatorHandler(auth))
	t.Cleanup(ts.Close)
	probes := httptest.NewServer(s.ProbeHandler())
	t.Cleanup(probes.Close)
	ask := func(url, who string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Who", who)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	for _, c := range []struct {
		path, who string
		code      int
		has, not  string
	}{
		{"/debug/things", "vendor", 200, `"globex"`, ""},
		{"/debug/things", "acme", 200, `"acme"`, "globex"},
		{"/debug/things", "", 401, "no certificate", "acme"},
		{"/debug/secrets", "acme", 403, "vendor", "all of them"},
		{"/debug/secrets", "vendor", 200, "all of them", ""},
		{"/debug/pprof/", "acme", 403, "vendor", ""},
		{"/debug/pprof/", "vendor", 200, "goroutine", ""},
		{"/metrics", "acme", 403, "vendor", ""},
		{"/metrics", "vendor", 200, "go_goroutines", ""},
		{"/debug/", "acme", 200, "things", "secrets"},
		{"/debug/", "vendor", 200, "secrets", ""},
		{"/debug/nothing", "acme", 404, "no debug view", ""},
		{"/healthz/ready", "acme", 200, "", ""},
		{"/status/", "acme", 200, "status page for acme", ""},
		{"/status/", "vendor", 200, "status page for vendor", ""},
		{"/status/", "", 401, "no certificate", "status page"},
	} {
		code, body := ask(ts.URL+c.path, c.who)
		if code != c.code || !strings.Contains(body, c.has) || (c.not != "" && strings.Contains(body, c.not)) {
			t.Errorf("%s as %q: %d %s; want %d with %q and without %q", c.path, c.who, code, body, c.code, c.has, c.not)
		}
	}
	// Probes and metrics only, for anyone, on the probe handler.
	for path, want := range map[string]int{"/healthz/ready": 200, "/healthz/live": 200, "/metrics": 200, "/debug/things": 404, "/debug/": 404, "/debug/pprof/": 404, "/status/": 404} {
		if code, _ := ask(probes.URL+path, ""); code != want {
			t.Errorf("probe handler %s: %d, want %d", path, code, want)
		}
	}
}

// The workload handler (nave-agent's status port on the pod IP): probes,
// metrics and the debug views, never the profiles or a page.
func TestWorkloadHandlerServesNoProfiles(t *testing.T) {
	s := New(slog.New(slog.DiscardHandler), NewRegistry())
	s.HandleDebug("certificate", "the workload's", func(*http.Request) (any, error) { return "spiffe://x", nil })
	s.HandlePage("/status/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "page") }))
	ts := httptest.NewServer(s.WorkloadHandler())
	t.Cleanup(ts.Close)
	for path, want := range map[string]int{
		"/healthz/ready": 200, "/healthz/live": 200, "/metrics": 200, "/debug/": 200, "/debug/certificate": 200,
		"/debug/pprof/": 404, "/debug/pprof/heap": 404, "/debug/pprof/profile": 404, "/debug/pprof/cmdline": 404,
		"/status/": 404,
	} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// An API handler gets the operator's scope on the operator listener, no
// scope on the plain admin handler, and is not served to probes.
func TestHandleAPI(t *testing.T) {
	s := New(slog.New(slog.DiscardHandler), NewRegistry())
	s.HandleAPI("POST /api/v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope, ok := ScopeOf(r)
		_, _ = io.WriteString(w, scope.Operator+" "+map[bool]string{true: "scoped", false: "unscoped"}[ok])
	}))
	post := func(h http.Handler, who string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/things", nil)
		if who != "" {
			req.Header.Set("Who", who)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	op := s.OperatorHandler(func(r *http.Request) (Scope, error) {
		return Scope{Operator: r.Header.Get("Who"), Mesh: r.Header.Get("Who")}, nil
	})
	if code, body := post(op, "acme"); code != http.StatusOK || body != "acme scoped" {
		t.Errorf("operator listener: %d %q", code, body)
	}
	if code, body := post(s.Handler(), ""); code != http.StatusOK || body != " unscoped" {
		t.Errorf("admin listener: %d %q", code, body)
	}
	if code, _ := post(s.ProbeHandler(), ""); code == http.StatusOK {
		t.Error("the probe handler serves an API")
	}
	defer func() {
		if recover() == nil {
			t.Error("an API outside /api/ was accepted")
		}
	}()
	s.HandleAPI("GET /things", http.NotFoundHandler())
}
