package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/gen/proxyless"
)

// The variables grpc's xDS client reads its bootstrap from. grpc-go reads both once,
// while its packages initialize, so a process cannot set them for itself: it has to start
// again with them set (reexecWith).
const (
	bootstrapFileEnv    = "GRPC_XDS_BOOTSTRAP"
	bootstrapContentEnv = "GRPC_XDS_BOOTSTRAP_CONFIG"
	// restartedEnv marks a process that reexecWith started, so it cannot loop.
	restartedEnv = "NAVE_DEMO_CLIENT_RESTARTED"
)

// envVar is one environment variable and its value.
type envVar struct{ name, value string }

// makeBootstrap returns a bootstrap that points at the hub's xDS address and names the
// node and the mesh and namespace it belongs to. With tls, the client dials the hub over
// TLS, verifies it with tls's CA and presents tls's certificate, and names the same
// certificate, verified against the mesh's roots (root-cert.pem beside it), as certificate
// provider "default" for mTLS to workloads when the hub's config asks for it; without, it
// dials in plaintext.
func makeBootstrap(hub, nodeID, mesh, namespace string, tls *tlsFiles) ([]byte, error) {
	b := xdsbootstrap.New(hub, nodeID, map[string]any{"MESH": mesh, "NAMESPACE": namespace}, tls)
	if tls != nil {
		b.WithFileWatcher(proxyless.CertificateProvider, tls.CertificateFile, tls.PrivateKeyFile,
			filepath.Join(filepath.Dir(tls.CertificateFile), meshRootsFile), "60s")
	}
	doc, err := b.JSON()
	if err != nil {
		return nil, fmt.Errorf("encode xds bootstrap: %w", err)
	}
	return doc, nil
}

// bootstrapEnv returns the bootstrap variable the process must run under for these
// options, or nil when the environment already holds it or the options ask for none.
// --bootstrap FILE becomes GRPC_XDS_BOOTSTRAP; --hub with --node-id becomes the bootstrap
// itself in GRPC_XDS_BOOTSTRAP_CONFIG, which needs no file to clean up.
func bootstrapEnv(o options, getenv func(string) string) (*envVar, error) {
	var want envVar
	switch {
	case o.bootstrap != "":
		path, err := filepath.Abs(o.bootstrap)
		if err != nil {
			return nil, fmt.Errorf("--bootstrap %s: %w", o.bootstrap, err)
		}
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("--bootstrap: %w", err)
		}
		want = envVar{name: bootstrapFileEnv, value: path}
	case o.hub != "" && o.nodeID != "":
		var tls *tlsFiles
		if o.xdsCertDir != "" {
			var err error
			if tls, err = loadTLSFiles(o.xdsCertDir, o.xdsCAFile, o.namespace); err != nil {
				return nil, err
			}
		}
		doc, err := makeBootstrap(o.hub, o.nodeID, o.mesh, o.namespace, tls)
		if err != nil {
			return nil, err
		}
		want = envVar{name: bootstrapContentEnv, value: string(doc)}
	case o.hub != "" || o.nodeID != "":
		return nil, errors.New("--hub and --node-id must be given together")
	default:
		if strings.HasPrefix(o.target, "xds:") && getenv(bootstrapFileEnv) == "" && getenv(bootstrapContentEnv) == "" {
			return nil, fmt.Errorf("target %s needs an xDS bootstrap: give --bootstrap, or --hub and --node-id, or set %s", o.target, bootstrapFileEnv)
		}
		return nil, nil
	}
	// grpc prefers the file when both variables are set, so the content alone must be set.
	if getenv(want.name) == want.value && (want.name == bootstrapFileEnv || getenv(bootstrapFileEnv) == "") {
		return nil, nil
	}
	return &want, nil
}

// reexecWith replaces the process with a new run of the same program and arguments, with
// v set and the other bootstrap variable unset. It returns only on failure.
func reexecWith(v envVar) error {
	if os.Getenv(restartedEnv) != "" {
		return fmt.Errorf("%s is still not as wanted after a restart", v.name)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable to restart with %s: %w", v.name, err)
	}
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != bootstrapFileEnv && name != bootstrapContentEnv {
			env = append(env, kv)
		}
	}
	env = append(env, v.name+"="+v.value, restartedEnv+"=1")
	if err := syscall.Exec(exe, os.Args, env); err != nil {
		return fmt.Errorf("restart %s with %s set: %w", exe, v.name, err)
	}
	return nil // not reached: Exec does not return on success
}

// declaresCertificates reports whether the bootstrap file at path declares
// certificate providers (a workload certificate for mTLS to workloads).
func declaresCertificates(path string) bool {
	if path == "" {
		return false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false // grpc reports the unreadable bootstrap itself
	}
	var b xdsbootstrap.Bootstrap
	return json.Unmarshal(data, &b) == nil && len(b.CertificateProviders) > 0
}
