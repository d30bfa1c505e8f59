package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/settings"
)

// TestStartAHubInProcess: a hub started with New and Run on free ports
// (what tests, a replica or the load tool do) serves its admin server and
// debug views, and Run returns nil once its context ends.
func TestStartAHubInProcess(t *testing.T) {
	var cfg hubconfig.Config
	args := []string{"--tls.plaintext", "--state.dir=" + t.TempDir(),
		"--admin.listen=127.0.0.1:0", "--spokes.listen=127.0.0.1:0", "--xds.listen=127.0.0.1:0"}
	if err := settings.Load(hubconfig.Program, &cfg, args, io.Discard); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"admin.listen", "spokes.listen", "xds.listen"} {
		if s.Addr(key) == nil {
			t.Errorf("no listener for %s", key)
		}
	}
	if a := s.Addr("replicas.relayListen"); a != nil {
		t.Errorf("a relay listener without replicas: %v", a)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	// The listeners are bound: a request waits for Run to serve it.
	for _, path := range []string{"/metrics", "/debug/meshes", "/debug/security"} {
		resp, err := http.Get("http://" + s.Addr("admin.listen").String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil", err)
		}
	case <-time.After(testwait.Timeout):
		t.Fatal("Run did not return after its context ended")
	}
}
