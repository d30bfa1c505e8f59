package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/testwait"
)

// fakeEnvoy writes a shell script standing in for Envoy.
func fakeEnvoy(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "envoy")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEnvoyChildGetsSIGTERM(t *testing.T) {
	bin := fakeEnvoy(t, "trap 'echo term > \"$0.term\"; exit 0' TERM\necho \"$@\" > \"$0.args\"\nwhile :; do sleep 0.05; done\n")
	e := &Envoy{Binary: bin, Bootstrap: "/run/boot.json", Grace: 10 * time.Second, Log: discard()}
	if !e.Present() {
		t.Fatal("the fake envoy is not present")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	testwait.Until(t, "envoy started with -c /run/boot.json", func() bool {
		b, err := os.ReadFile(bin + ".args")
		return err == nil && strings.TrimSpace(string(b)) == "-c /run/boot.json"
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after the context ended: %v; want nil", err)
	}
	if b, err := os.ReadFile(bin + ".term"); err != nil || strings.TrimSpace(string(b)) != "term" {
		t.Errorf("envoy did not get SIGTERM (%v)", err)
	}
}

func TestEnvoyChildKilledAfterGrace(t *testing.T) {
	bin := fakeEnvoy(t, "trap '' TERM\necho up > \"$0.up\"\nwhile :; do sleep 0.05; done\n")
	e := &Envoy{Binary: bin, Bootstrap: "b", Grace: 200 * time.Millisecond, Log: discard()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	testwait.Until(t, "envoy up", func() bool { _, err := os.Stat(bin + ".up"); return err == nil })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an envoy ignoring SIGTERM was not killed")
	}
}

func TestEnvoyChildDiesIsAnError(t *testing.T) {
	e := &Envoy{Binary: fakeEnvoy(t, "exit 3\n"), Bootstrap: "b", Grace: time.Second, Log: discard()}
	err := e.Run(context.Background())
	if !errors.Is(err, ErrEnvoyExited) || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Run: %v; want ErrEnvoyExited with exit status 3", err)
	}
	missing := &Envoy{Binary: filepath.Join(t.TempDir(), "none"), Log: discard()}
	if missing.Present() {
		t.Error("a missing binary is present")
	}
	if err := missing.Run(context.Background()); err == nil || errors.Is(err, ErrEnvoyExited) {
		t.Errorf("Run of a missing binary: %v; want a start error", err)
	}
}

func TestEnvoyReady(t *testing.T) {
	ready := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ready" || !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("PRE_INITIALIZING"))
			return
		}
		_, _ = w.Write([]byte("LIVE"))
	}))
	defer srv.Close()
	e := &Envoy{AdminPort: srv.Listener.Addr().(*net.TCPAddr).Port}
	if err := e.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "PRE_INITIALIZING") {
		t.Errorf("Ready before Envoy is: %v", err)
	}
	ready = true
	if err := e.Ready(context.Background()); err != nil {
		t.Errorf("Ready: %v", err)
	}
}
