package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newTestServer(t *testing.T) (*Server, *prometheus.Registry, *httptest.Server) {
	t.Helper()
	reg := NewRegistry()
	s := New(slog.New(slog.DiscardHandler), reg)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, reg, ts
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), resp.Header
}

func TestReadyFlips(t *testing.T) {
	s, _, ts := newTestServer(t)
	var synced atomic.Bool
	s.AddReadyCheck("sources", func() error {
		if !synced.Load() {
			return errors.New("initial sync not done")
		}
		return nil
	})
	s.AddReadyCheck("always", func() error { return nil })

	status, body, header := get(t, ts.URL+"/healthz/ready")
	if status != http.StatusServiceUnavailable {
		t.Fatalf("status %d before sync, want 503: %s", status, body)
	}
	if header.Get("Content-Type") != "application/json" {
		t.Errorf("content type %q", header.Get("Content-Type"))
	}
	var got readiness
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := []failedCheck{{Check: "sources", Reason: "initial sync not done"}}
	if got.Ready || len(got.Failing) != 1 || got.Failing[0] != want[0] {
		t.Fatalf("body %s, want only the sources check failing", body)
	}

	synced.Store(true)
	status, body, _ = get(t, ts.URL+"/healthz/ready")
	if status != http.StatusOK || !strings.Contains(body, `"ready": true`) {
		t.Fatalf("after sync: status %d body %s", status, body)
	}
	if status, _, _ := get(t, ts.URL+"/healthz/live"); status != http.StatusOK {
		t.Fatalf("live: status %d", status)
	}
}

func TestMetricsExposesRegisteredCounter(t *testing.T) {
	_, reg, ts := newTestServer(t)
	pushes := prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_test_pushes_total", Help: "Pushes."})
	reg.MustRegister(pushes)
	pushes.Add(3)

	status, body, _ := get(t, ts.URL+"/metrics")
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	for _, want := range []string{"nave_test_pushes_total 3", "go_goroutines", "process_"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestDebugViews(t *testing.T) {
	s, _, ts := newTestServer(t)
	s.HandleDebug("clusters", "connected clusters", func(r *http.Request) (any, error) {
		return map[string]any{"clusters": []string{"c1", "c2"}, "mesh": r.URL.Query().Get("mesh")}, nil
	})
	s.HandleDebug("broken", "always fails", func(*http.Request) (any, error) {
		return nil, errors.New("store unavailable")
	})
	s.HandleDebug("unencodable", "returns a channel", func(*http.Request) (any, error) {
		return make(chan int), nil
	})

	status, body, _ := get(t, ts.URL+"/debug/clusters?mesh=m1")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if !strings.Contains(body, "\n  \"clusters\": [") {
		t.Errorf("body is not indented JSON: %s", body)
	}
	var view struct {
		Clusters []string `json:"clusters"`
		Mesh     string   `json:"mesh"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil || len(view.Clusters) != 2 || view.Mesh != "m1" {
		t.Fatalf("body %s (%v)", body, err)
	}

	for path, want := range map[string]struct {
		status int
		error  string
	}{
		"/debug/broken":      {http.StatusInternalServerError, "store unavailable"},
		"/debug/unencodable": {http.StatusInternalServerError, "encoding response"},
		"/debug/nothing":     {http.StatusNotFound, `no debug view \"nothing\"`},
	} {
		status, body, _ := get(t, ts.URL+path)
		var e errorBody
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Errorf("%s: body %q is not JSON: %v", path, body, err)
		}
		if status != want.status || !strings.Contains(body, want.error) {
			t.Errorf("%s: status %d body %s; want %d with %q", path, status, body, want.status, want.error)
		}
	}
}

func TestDebugIndex(t *testing.T) {
	s, _, ts := newTestServer(t)
	s.HandleDebug("config", "effective configuration", func(*http.Request) (any, error) { return nil, nil })
	s.HandleDebug("clusters", "connected clusters", func(*http.Request) (any, error) { return nil, nil })

	status, body, _ := get(t, ts.URL+"/debug/")
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	var index []debugEntry
	if err := json.Unmarshal([]byte(body), &index); err != nil {
		t.Fatal(err)
	}
	want := []debugEntry{
		{Name: "clusters", Path: "/debug/clusters", Description: "connected clusters"},
		{Name: "config", Path: "/debug/config", Description: "effective configuration"},
		{Name: "pprof", Path: "/debug/pprof/", Description: "Go runtime profiles (pprof)"},
	}
	if len(index) != len(want) {
		t.Fatalf("index %v, want %v", index, want)
	}
	for i := range want {
		if index[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, index[i], want[i])
		}
	}
	if status, body, _ := get(t, ts.URL+"/debug/pprof/"); status != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof index: status %d", status)
	}
}

func TestRegistrationMistakesPanic(t *testing.T) {
	s, _, _ := newTestServer(t)
	s.HandleDebug("x", "", func(*http.Request) (any, error) { return nil, nil })
	s.AddReadyCheck("x", func() error { return nil })
	for name, register := range map[string]func(){
		"duplicate view":  func() { s.HandleDebug("x", "", nil) },
		"reserved name":   func() { s.HandleDebug("pprof", "", nil) },
		"nested name":     func() { s.HandleDebug("a/b", "", nil) },
		"duplicate check": func() { s.AddReadyCheck("x", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			register()
		}()
	}
}

func TestServeShutsDownWhenContextEnds(t *testing.T) {
	s := New(slog.New(slog.DiscardHandler), NewRegistry())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()

	status, _, _ := get(t, "http://"+lis.Addr().String()+"/healthz/live")
	if status != http.StatusOK {
		t.Fatalf("live: status %d", status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s of cancel")
	}
	if _, err := http.Get("http://" + lis.Addr().String() + "/healthz/live"); err == nil {
		t.Fatal("server still answers after Serve returned")
	}
}

func TestServeReportsListenerFailure(t *testing.T) {
	s := New(slog.New(slog.DiscardHandler), NewRegistry())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	if err := s.Serve(t.Context(), lis); err == nil {
		t.Fatal("Serve on a closed listener returned nil")
	}
}

func TestRegisterWhileServing(t *testing.T) {
	s, _, ts := newTestServer(t)
	const views = 20
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range views {
			name := "view-" + string(rune('a'+i))
			s.HandleDebug(name, "added while serving", func(*http.Request) (any, error) { return name, nil })
			s.AddReadyCheck(name, func() error { return nil })
		}
	}()
	for range 5 {
		get(t, ts.URL+"/debug/")
		get(t, ts.URL+"/healthz/ready")
	}
	<-done
	_, body, _ := get(t, ts.URL+"/debug/")
	var index []debugEntry
	if err := json.Unmarshal([]byte(body), &index); err != nil {
		t.Fatal(err)
	}
	if len(index) != views+1 {
		t.Fatalf("index has %d entries, want %d", len(index), views+1)
	}
	if status, body, _ := get(t, ts.URL+"/debug/view-c"); status != http.StatusOK || strings.TrimSpace(body) != `"view-c"` {
		t.Fatalf("view-c: status %d body %s", status, body)
	}
}

// HandlePage serves a subtree outside the admin's own paths, and refuses
// any other path as a programming mistake.
func TestHandlePage(t *testing.T) {
	s := New(slog.New(slog.DiscardHandler), NewRegistry())
	s.HandlePage("/status/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "page at "+r.URL.Path)
	}))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for path, want := range map[string]string{"/status/": "page at /status/", "/status/app.js": "page at /status/app.js", "/status": "page at /status/"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != want {
			t.Errorf("GET %s: %d %q, want 200 %q", path, resp.StatusCode, b, want)
		}
	}
	for _, bad := range []string{"status", "/status", "/debug/status/", "/healthz/x/", "/Status/", "/a//", "/status/"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("HandlePage(%q) did not panic", bad)
				}
			}()
			s.HandlePage(bad, http.NotFoundHandler())
		}()
	}
}
