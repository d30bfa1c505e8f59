package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary plays every part: run under one of the demo's binary names (through a
// symlink) it is a stub of that binary; with asMain set it is the launcher.
const (
	asMain = "NAVE_DEMO_AS_MAIN"
	// stubDirEnv names the directory where each stub records its pid, name and arguments.
	stubDirEnv = "NAVE_STUB_DIR"
	// These name a binary (e.g. nave-spoke) whose stubs misbehave in one way.
	stubIgnoreTermEnv = "NAVE_STUB_IGNORE_TERM" // ignores SIGTERM
	stubNotReadyEnv   = "NAVE_STUB_NOT_READY"   // answers 503 on /healthz/ready
	stubExitEnv       = "NAVE_STUB_EXIT"        // exits with status 3 right after starting
)

// stubNames are the binaries the launcher starts.
var stubNames = []string{"nave-hub", "nave-spoke", "nave-demo-backend", "nave-demo-client"}

func TestMain(m *testing.M) {
	if name := filepath.Base(os.Args[0]); slices.Contains(stubNames, name) {
		os.Exit(stub(name, os.Args[1:]))
	}
	if os.Getenv(asMain) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// stub stands in for a demo binary: it records itself, serves readiness on
// --admin.listen if given, and runs until SIGTERM or SIGINT.
func stub(name string, args []string) int {
	record := strings.Join(append([]string{name}, args...), "\n")
	path := filepath.Join(os.Getenv(stubDirEnv), strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(path+".tmp", []byte(record), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("stub %s running\n", name)
	if os.Getenv(stubExitEnv) == name {
		return 3
	}

	if i := slices.Index(args, "--admin.listen"); i >= 0 && i+1 < len(args) {
		lis, err := net.Listen("tcp", args[i+1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ready := os.Getenv(stubNotReadyEnv) != name
		go http.Serve(lis, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz/ready" || !ready {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
			}
		}))
	}

	if os.Getenv(stubIgnoreTermEnv) == name {
		signal.Ignore(syscall.SIGTERM)
		for { // until SIGKILL
			time.Sleep(time.Hour)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	fmt.Printf("stub %s stopping\n", name)
	return 0
}
