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
	// stubNavectlFailEnv names a navectl command (token, ca-hash, cert) that fails.
	stubNavectlFailEnv = "NAVE_STUB_NAVECTL_FAIL"
)

// stubNames are the binaries the launcher starts and runs.
var stubNames = []string{"nave-hub", "nave-spoke", "nave-demo-backend", "nave-demo-client", "navectl"}

// What the navectl stub prints.
const (
	stubToken  = "nave-join.0123456789abcdef.stub-secret"
	stubPin    = "sha256:5d0e"
	stubIssued = "issued spiffe://cluster.local/ns/demo/sa/demo-client (stub)"
)

func TestMain(m *testing.M) {
	if name := filepath.Base(os.Args[0]); name == "navectl" {
		os.Exit(stubNavectl(os.Args[1:]))
	} else if slices.Contains(stubNames, name) {
		os.Exit(stub(name, os.Args[1:]))
	}
	if os.Getenv(asMain) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// record writes what a stub was started with to the stub directory, as file name.
func record(file string, args []string) error {
	path := filepath.Join(os.Getenv(stubDirEnv), file)
	if err := os.WriteFile(path+".tmp", []byte(strings.Join(args, "\n")), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// stubNavectl stands in for navectl: it records its run (as navectl-PID, apart from the
// children's records) and prints what the real one would, or fails as told.
func stubNavectl(args []string) int {
	if err := record("navectl-"+strconv.Itoa(os.Getpid()), args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if len(args) > 0 && os.Getenv(stubNavectlFailEnv) == args[0] {
		fmt.Fprintf(os.Stderr, "stub navectl: %s refused\n", args[0])
		return 1
	}
	switch {
	case len(args) >= 2 && args[0] == "token" && args[1] == "create":
		fmt.Println(stubToken)
		fmt.Fprintln(os.Stderr, "join token 0123456789abcdef for default/demo-cluster, single use")
	case len(args) == 2 && args[0] == "ca-hash":
		fmt.Println(stubPin)
	case len(args) >= 2 && args[0] == "cert" && args[1] == "issue":
		fmt.Println(stubIssued)
	default:
		fmt.Fprintf(os.Stderr, "stub navectl: unexpected arguments %q\n", args)
		return 2
	}
	return 0
}

// stub stands in for a demo binary: it records itself, serves readiness on
// --admin.listen if given, and runs until SIGTERM or SIGINT.
func stub(name string, args []string) int {
	if err := record(strconv.Itoa(os.Getpid()), append([]string{name}, args...)); err != nil {
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
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		for range term { // SIGTERM is ignored; until SIGKILL
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	fmt.Printf("stub %s stopping\n", name)
	return 0
}
