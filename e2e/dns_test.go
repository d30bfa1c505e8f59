package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/dnstest"
	"github.com/navemesh/nave/internal/testenv"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/spoke/capture"
)

// dnsConfig is the two clusters' namespaces on one API server: each
// spoke watches its own (a namespace selector), so far/only exists only
// in c2; demo (c1) holds the pod's service account and a ServiceEntry
// without an address.
const dnsConfig = `apiVersion: v1
kind: Namespace
metadata: {name: demo, labels: {nave.test/cluster: c1}}
---
apiVersion: v1
kind: Namespace
metadata: {name: far, labels: {nave.test/cluster: c2}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: demo}
---
apiVersion: v1
kind: Service
metadata: {name: only, namespace: far}
spec:
  ports: [{name: http, port: 8080}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.external.mesh]
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: DNS
  location: MESH_EXTERNAL
`

// TestDNSThroughTheAgent is issue 24's proof of DNS proxying: the real
// nave-agent runs as uid 1337 in a network namespace the test creates,
// captured by `nave-agent capture --redirect-dns` there, its resolv.conf
// naming a test resolver on 127.0.0.53 inside the namespace; it gets the
// name table from the real hub, fed by two real spokes. glibc's resolver
// (getent), querying 127.0.0.53 as the namespace's resolv.conf says,
// resolves through the capture and the agent: a Kubernetes Service that
// exists only in the other cluster (by its short form and its full name),
// a ServiceEntry host without an address (its auto-allocated address),
// and a name outside the mesh, forwarded to the test resolver.
func TestDNSThroughTheAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to create network namespaces and run the agent as uid 1337")
	}
	for _, prog := range []string{"ip", "iptables-restore", "setpriv", "getent"} {
		if _, err := exec.LookPath(prog); err != nil {
			testenv.Missing(t, "needs %s: %v", prog, err)
		}
	}
	c := kubeCluster(t)
	c.Apply(t, []byte(dnsConfig))
	cs := kubernetes.NewForConfigOrDie(c.Admin)
	svc, err := cs.CoreV1().Services("far").Get(context.Background(), "only", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP == "" {
		t.Fatalf("far/only: %v %v", svc, err)
	}
	onlyIP := svc.Spec.ClusterIP

	h := newSecureHub(t)
	raAddr := addr(harness.FreePort(t))
	startSecureKubeSpoke(t, h, "c1", h.token(t, "default", "c1", "1h"), raAddr, c, "--kubernetes.namespace-selector", "nave.test/cluster=c1")
	startSecureKubeSpoke(t, h, "c2", h.token(t, "default", "c2", "1h"), addr(harness.FreePort(t)), c, "--kubernetes.namespace-selector", "nave.test/cluster=c2")
	h.waitSynced(t, "default/c1")
	h.waitSynced(t, "default/c2")
	meshRoot, err := os.ReadFile(filepath.Join(h.state, "ca", "default", "root-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{cs: cs, ra: raAddr, raID: "spiffe://cluster.local/nave/cluster/c1", meshRoot: meshRoot}

	// The pod: a network namespace whose resolv.conf (ip netns exec
	// mounts /etc/netns/NAME/resolv.conf on /etc/resolv.conf) names the
	// test resolver on loopback.
	ns := harness.NewNetNS(t)
	etc := filepath.Join("/etc/netns", ns.Name)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etc) })
	writeFile(t, filepath.Join(etc, "resolv.conf"), "nameserver 127.0.0.53\nsearch demo.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5 timeout:2 attempts:2\n")
	upstream := startNamespaceResolver(t, ns, "127.0.0.53:53", map[string]string{"www.example.test.": "192.0.2.80"})

	// The hub and the RA, reached from the pod through the namespace's
	// link to the host.
	xdsAddr, raFwd := forward(t, ns.HostIP, addr(h.xds)), forward(t, ns.HostIP, raAddr)

	status := harness.FreePort(t)
	cfg := capture.Default()
	cfg.RedirectDNS = true
	cfg.ExcludeInboundPorts = []int{status}
	if out, err := exec.Command("ip", append([]string{"netns", "exec", ns.Name, binary("nave-agent"), "capture", "--ipv6=false"}, cfg.Args()...)...).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "ipv4 rules installed") {
		t.Fatalf("capture: %v: %s", err, out)
	}

	work := t.TempDir()
	env, dir, _ := agentEnv(t, a, h, raAddr, podEnv{name: "client-1", namespace: "demo", sa: "client", mode: "envoy", labels: map[string]string{"app": "client"}}, work)
	// The agent runs as the proxy's uid, as in a pod: its files must be
	// its to read and write.
	for _, d := range []string{filepath.Dir(work), work, filepath.Join(work, "podinfo"), filepath.Join(work, "tokens")} {
		must(t, os.Chmod(d, 0o755))
	}
	must(t, os.Chmod(dir, 0o777))
	for _, f := range []string{"podinfo/labels", "podinfo/annotations", "tokens/istio-token"} {
		must(t, os.Chmod(filepath.Join(work, f), 0o644))
	}
	env = append(env, "NAVE_XDS_ADDRESS="+xdsAddr, "NAVE_XDS_SERVER_NAME=127.0.0.1", "NAVE_RA_ADDRESS="+raFwd, "NAVE_POD_IP="+ns.NSIP,
		"NAVE_STATUS_LISTEN="+net.JoinHostPort(ns.NSIP, strconv.Itoa(status)), `NAVE_PROXY_METADATA={"ISTIO_META_DNS_CAPTURE":"true"}`)
	harness.StartEnv(t, "agent-dns", "ip", env, "netns", "exec", ns.Name, "setpriv", "--reuid=1337", "--regid=1337", "--clear-groups", binary("nave-agent"))
	statusURL := func(path string) string { return "http://" + net.JoinHostPort(ns.NSIP, strconv.Itoa(status)) + path }
	harness.WaitReady(t, statusURL("/healthz/ready"), 60*time.Second)

	// The table arrives from the hub over the agent's own stream.
	testwait.For(t, 60*time.Second, func() error {
		var v struct {
			Table *struct {
				Hosts   int
				Entries []struct{ Host string }
			}
		}
		if err := harness.GetJSON(statusURL("/debug/dns"), &v); err != nil {
			return err
		}
		if v.Table == nil {
			return fmt.Errorf("no name table yet")
		}
		hosts := map[string]bool{}
		for _, e := range v.Table.Entries {
			hosts[e.Host] = true
		}
		if !hosts["only.far.svc.cluster.local"] || !hosts["db.external.mesh"] {
			return fmt.Errorf("the table holds %v", v.Table.Entries)
		}
		return nil
	})

	getent := func(name string) (string, error) {
		out, err := exec.Command("ip", "netns", "exec", ns.Name, "getent", "ahostsv4", name).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("getent ahostsv4 %s: %v: %s", name, err, out)
		}
		fields := strings.Fields(string(out))
		if len(fields) == 0 {
			return "", fmt.Errorf("getent ahostsv4 %s: no address", name)
		}
		return fields[0], nil
	}
	for _, tc := range []struct{ name, want string }{
		{"only.far", onlyIP},                   // short form, through the search path
		{"only.far.svc.cluster.local", onlyIP}, // the full name, first tried with the search domains
		{"db.external.mesh", ""},               // auto-allocated: checked below
		{"www.example.test", "192.0.2.80"},     // forwarded
	} {
		got, err := getent(tc.name)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		t.Logf("%s: %s", tc.name, got)
		switch {
		case tc.want != "" && got != tc.want:
			t.Errorf("%s resolves to %s, want %s", tc.name, got, tc.want)
		case tc.want == "" && !strings.HasPrefix(got, "240.240."):
			t.Errorf("%s resolves to %s, want an auto-allocated address (240.240.0.0/16)", tc.name, got)
		}
	}
	if _, err := getent("nothing.example.test"); err == nil {
		t.Error("a name nobody knows resolved")
	}
	if upstream.queries.Load() == 0 {
		t.Error("the test resolver got no query: nothing was forwarded")
	}
	var v struct{ Queries map[string]uint64 }
	if err := harness.GetJSON(statusURL("/debug/dns"), &v); err != nil {
		t.Fatal(err)
	}
	t.Logf("the agent's queries: %v; the test resolver's: %d", v.Queries, upstream.queries.Load())
	if v.Queries["answered"] == 0 || v.Queries["forwarded"] == 0 || v.Queries["failed"] != 0 {
		t.Errorf("the agent's queries %v; want some answered and forwarded, none failed", v.Queries)
	}
	assertMetricsDocumented(t, statusURL("/metrics"))

	// The answer latency on the real path (a socket in the pod's
	// namespace, captured, the agent's process): logged, never a
	// threshold.
	var conn *dns.Conn
	inNetNS(t, ns.Name, func() (err error) {
		conn, err = dns.Dial("udp", "127.0.0.53:53")
		return err
	})
	defer conn.Close()
	for _, q := range []struct{ what, name string }{
		{"table hit", "only.far.svc.cluster.local."},
		{"forwarded", "www.example.test."},
	} {
		lat := make([]time.Duration, 0, 500)
		for range cap(lat) {
			m := new(dns.Msg)
			m.SetQuestion(q.name, dns.TypeA)
			start := time.Now()
			if err := conn.WriteMsg(m); err != nil {
				t.Fatal(err)
			}
			if resp, err := conn.ReadMsg(); err != nil || len(resp.Answer) != 1 {
				t.Fatalf("%s: %v %v", q.name, resp, err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		t.Logf("through the capture and the agent, %s: p50 %s, p99 %s (%d queries)", q.what, lat[len(lat)/2], lat[len(lat)*99/100], len(lat))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// nsResolver is a DNS server the test runs in a network namespace.
type nsResolver struct{ queries atomic.Int64 }

// startNamespaceResolver serves DNS on addr (UDP and TCP) inside ns:
// answers maps a name to its IPv4 address, any other name is NXDOMAIN.
// Its sockets are made in ns by a thread that enters it (a socket stays in
// the namespace it was made in) and served from the test process.
func startNamespaceResolver(t *testing.T, ns *harness.NetNS, addr string, answers map[string]string) *nsResolver {
	t.Helper()
	var pc net.PacketConn
	var l net.Listener
	inNetNS(t, ns.Name, func() (err error) {
		pc, l, err = dnstest.Listen(addr)
		return err
	})
	r := &nsResolver{}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		r.queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		if ip, ok := answers[strings.ToLower(q.Name)]; ok {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(ip)})
			}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	t.Cleanup(dnstest.Start(pc, l, h))
	return r
}

// inNetNS runs fn on an OS thread inside the network namespace name
// (/var/run/netns/name). The thread goes back to the test's namespace
// after, or, if it cannot, dies with its goroutine.
func inNetNS(t *testing.T, name string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return // still locked: the thread is discarded
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join("/var/run/netns", name))
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// forward listens on host (port chosen) and copies each connection to and
// from target; it returns the listening address. It lets a process in a
// network namespace reach a server on the host's loopback.
func forward(t *testing.T, host, target string) string {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return lis.Addr().String()
}
