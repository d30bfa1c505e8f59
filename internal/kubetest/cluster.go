package kubetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/navemesh/nave/internal/freeport"
)

// AdminUser is the user of Cluster.Admin, in group system:masters.
const AdminUser = "kubetest-admin"

// startTimeout bounds how long etcd and kube-apiserver may take to become ready.
const startTimeout = 2 * time.Minute

// probeTimeout bounds one readiness request, so a server that died is noticed quickly.
const probeTimeout = 2 * time.Second

// logTailLines is how much of each server's log a failed test prints.
const logTailLines = 40

// Options configures Start.
type Options struct {
	// Port is kube-apiserver's secure port on 127.0.0.1; 0 picks a free port.
	Port int
	// ExtraIPs are more addresses of this machine kube-apiserver serves on (it then binds all
	// addresses) and names in its certificate: pods of internal/kubenode reach it on their
	// bridge's gateway.
	ExtraIPs []net.IP
	// ServiceAccountAdmission turns on the ServiceAccount admission plugin, which mounts a
	// projected token into every pod and needs the namespace's ServiceAccount to exist: only
	// with a controller manager that creates them (internal/kubenode).
	ServiceAccountAdmission bool
	// APIServerArgs are more kube-apiserver flags.
	APIServerArgs []string
}

// Cluster is a running etcd and kube-apiserver. Its fields are set by Start and never change; its
// methods may be called from any goroutine.
type Cluster struct {
	// URL is kube-apiserver's address, https://127.0.0.1:Port.
	URL string
	// Port is kube-apiserver's secure port.
	Port int
	// Admin authenticates as AdminUser, in group system:masters: RBAC allows it everything.
	Admin *rest.Config
	// CAFile is the PEM file of the CA of kube-apiserver's serving certificate.
	CAFile string
	// ServiceAccountKeyFile is the PEM RSA key that signs and verifies service account tokens.
	ServiceAccountKeyFile string

	etcd      *process
	apiserver *process
	stopOnce  sync.Once
}

// Start starts etcd and kube-apiserver on 127.0.0.1, waits until kube-apiserver's /readyz passes,
// and stops both when the test ends (SIGTERM, then SIGKILL after 10 s). Their logs go to files in
// t.TempDir(); the end of each is printed if the test failed.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	assets := Assets(t)
	dir := t.TempDir()
	creds, err := writeCredentials(dir, opts.ExtraIPs)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{CAFile: creds.certFile, ServiceAccountKeyFile: creds.saKeyFile}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, p := range []*process{c.etcd, c.apiserver} {
				if p != nil {
					t.Logf("%s log (end):\n%s", p.name, p.tail(logTailLines))
				}
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// Free ports are found by binding and closing, so a process started
	// meanwhile (tests of other packages run in parallel) may take one
	// first: a start that fails on a port in use is retried on new ones.
	var etcdURL string
	etcdStarts := 0
	err = retryPortClash(t, func() error {
		etcdStarts++ // a data dir per start: a failed one may have begun to bootstrap
		etcdPort, peerPort := freePort(t), freePort(t)
		etcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdPort)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		c.etcd, err = startProcess("etcd", filepath.Join(assets, "etcd"), filepath.Join(dir, "etcd.log"),
			"--name=kubetest",
			"--data-dir="+filepath.Join(dir, "etcd-data-"+strconv.Itoa(etcdStarts)),
			"--listen-client-urls="+etcdURL,
			"--advertise-client-urls="+etcdURL,
			"--listen-peer-urls="+peerURL,
			"--initial-advertise-peer-urls="+peerURL,
			"--initial-cluster=kubetest="+peerURL,
			"--unsafe-no-fsync",
			"--log-level=warn",
		)
		if err != nil {
			return err
		}
		return waitHealthy(ctx, c.etcd, http.DefaultClient, etcdURL+"/health")
	}, func() *process { return c.etcd })
	if err != nil {
		t.Fatal(err)
	}

	var client *http.Client
	err = retryPortClash(t, func() error {
		port := opts.Port
		if port == 0 {
			port = freePort(t)
		}
		c.URL, c.Port = "https://127.0.0.1:"+strconv.Itoa(port), port
		c.Admin = &rest.Config{
			Host:            c.URL,
			BearerToken:     creds.adminToken,
			TLSClientConfig: rest.TLSClientConfig{CAData: creds.caPEM},
			QPS:             200,
			Burst:           400,
		}
		bind, admission := "127.0.0.1", "--disable-admission-plugins=ServiceAccount"
		if len(opts.ExtraIPs) > 0 {
			bind = "0.0.0.0"
		}
		if opts.ServiceAccountAdmission {
			admission = "--enable-admission-plugins=ServiceAccount"
		}
		args := append([]string{
			"--bind-address=" + bind,
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--etcd-servers=" + etcdURL,
			"--tls-cert-file=" + creds.certFile,
			"--tls-private-key-file=" + creds.keyFile,
			"--token-auth-file=" + creds.tokenFile,
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + creds.saKeyFile,
			"--service-account-signing-key-file=" + creds.saKeyFile,
			"--service-cluster-ip-range=10.96.0.0/16",
			"--endpoint-reconciler-type=none",
			admission,
		}, opts.APIServerArgs...)
		c.apiserver, err = startProcess("kube-apiserver", filepath.Join(assets, "kube-apiserver"), filepath.Join(dir, "kube-apiserver.log"), args...)
		if err != nil {
			return err
		}
		if client, err = rest.HTTPClientFor(c.Admin); err != nil {
			return fmt.Errorf("building the admin client: %w", err)
		}
		return waitHealthy(ctx, c.apiserver, client, c.URL+"/readyz")
	}, func() *process { return c.apiserver })
	if err != nil {
		t.Fatal(err)
	}
	// Objects without a namespace go to "default" (see Apply), which a controller inside
	// kube-apiserver creates, possibly just after /readyz passes.
	if err := waitHealthy(ctx, c.apiserver, client, c.URL+"/api/v1/namespaces/default"); err != nil {
		t.Fatal(err)
	}
	return c
}

// Stop stops kube-apiserver, then etcd, and returns once both have exited. Calling it again does
// nothing.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.apiserver != nil {
			c.apiserver.stop()
		}
		if c.etcd != nil {
			c.etcd.stop()
		}
	})
}

// As returns a copy of the admin configuration that impersonates user in groups. The API server
// authorizes each request as that user, so RBAC rules bound to it (or, for
// system:serviceaccount:NS:NAME, to the service account) apply.
func (c *Cluster) As(user string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(c.Admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}

// waitHealthy polls url until it answers 200, p exits, or ctx ends.
func waitHealthy(ctx context.Context, p *process, client *http.Client, url string) error {
	var last string
	for {
		if p.exited() {
			return fmt.Errorf("%s exited while starting: %v", p.name, p.err)
		}
		status, err := probe(ctx, client, url)
		if err != nil {
			last = err.Error()
		} else if status == http.StatusOK {
			return nil
		} else {
			last = http.StatusText(status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v (last: %s)", p.name, startTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// probe GETs url once, within probeTimeout, and returns the status code.
func probe(ctx context.Context, client *http.Client, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// portClashAttempts bounds the starts retryPortClash makes.
const portClashAttempts = 3

// retryPortClash runs start until it succeeds, fails for another reason
// than a port in use (the process's log says "address already in use"),
// or has tried portClashAttempts times; proc is the process start made,
// stopped before a retry.
func retryPortClash(t testing.TB, start func() error, proc func() *process) error {
	var err error
	for attempt := 1; attempt <= portClashAttempts; attempt++ {
		if err = start(); err == nil {
			return nil
		}
		p := proc()
		if p == nil || !strings.Contains(p.tail(logTailLines), "address already in use") {
			return err
		}
		p.stop()
		t.Logf("%s: a port was taken meanwhile (attempt %d of %d): %v", p.name, attempt, portClashAttempts, err)
	}
	return err
}

// freePort returns a loopback TCP port that was free a moment ago, below
// the ephemeral range (internal/freeport).
func freePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	return p
}
