package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/internal/dnstest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/x509test"
	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/spoke/agent/dnsproxy"
	"github.com/navemesh/nave/spoke/agentconfig"
)

// TestAgentAnswersDNS runs a whole agent of a DNS-capturing sidecar: it
// gets its certificate from the RA, opens the name table stream as its
// Envoy's node, and answers DNS from the table it receives, forwarding
// the rest to the resolver its resolv.conf names; /debug/dns shows it.
func TestAgentAnswersDNS(t *testing.T) {
	ca := x509test.NewAuthority("test")
	raAddr := startRA(t, &fakeRA{ca: ca}, testRA)
	stub, hubAddr := startADSStub(t, ca)
	upstream := dnstest.Serve(t, "127.0.0.1:0", dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeNameError)
		_ = w.WriteMsg(m)
	}))
	dir := t.TempDir()
	resolv, token := filepath.Join(dir, "resolv.conf"), filepath.Join(dir, "token")
	must(t, os.WriteFile(resolv, []byte("nameserver 127.0.0.1\nsearch demo.svc.cluster.local svc.cluster.local\n"), 0o644))
	must(t, os.WriteFile(token, []byte("token"), 0o600))
	cfg := agentconfig.Config{Mode: agentconfig.ModeEnvoy, ProxyType: agentconfig.ProxySidecar, Mesh: "default", Cluster: "c1",
		TrustDomain: "cluster.local", DomainSuffix: "cluster.local",
		Pod:           agentconfig.Pod{Name: "web-1", Namespace: "demo", ServiceAccount: "web", IP: "10.0.0.5"},
		RA:            agentconfig.RA{Address: raAddr, Identity: testRA.String(), TokenFile: token, CertTTL: time.Hour, Timeout: 10 * time.Second, RenewFraction: 0.5, RenewJitter: 0.1, RetryInitial: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond},
		Trust:         agentconfig.Trust{MeshRoots: string(ca.PEM()), HubCA: string(ca.PEM())},
		XDS:           agentconfig.XDS{Address: hubAddr, ServerName: "hub"},
		Dir:           filepath.Join(dir, "run"),
		Envoy:         agentconfig.Envoy{Binary: filepath.Join(dir, "no-envoy"), AdminPort: 15000, ReadyPort: 15020},
		DNS:           agentconfig.DNS{Address: "127.0.0.1:0", ResolvConf: resolv, UpstreamTimeout: 2 * time.Second},
		ProxyMetadata: `{"ISTIO_META_DNS_CAPTURE":"true"}`,
	}
	a, err := New(cfg, discard(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// resolv.conf names port 53 only: the proxy New made from it forwards
	// there; swap in one that forwards to the test resolver's port.
	o := a.dns.server.Options()
	if len(o.Upstreams) != 1 || o.Upstreams[0] != "127.0.0.1:53" || len(o.Scope.Search) != 2 || o.Scope.Namespace != "demo" {
		t.Fatalf("the proxy's options from resolv.conf: %+v", o)
	}
	o.Upstreams, o.Registerer = []string{upstream}, nil
	a.dns.server = dnsproxy.New(o)
	status := httptest.NewUnstartedServer(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, status.Listener) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})

	s := stub.stream(t)
	first := s.next(t)
	if first.GetTypeUrl() != typeurl.NameTable || first.GetNode().GetId() != "sidecar~10.0.0.5~web-1.demo~demo.svc.cluster.local" ||
		first.GetNode().GetMetadata().GetFields()["DNS_CAPTURE"].GetStringValue() != "true" {
		t.Fatalf("first request %v; want the name table, as the Envoy's node with DNS_CAPTURE", first)
	}
	table, err := anypb.New(&ndsv1.NameTable{Table: map[string]*ndsv1.NameTable_NameInfo{
		"reviews.demo.svc.cluster.local": {Ips: []string{"10.96.0.7"}, Registry: "Kubernetes", Shortname: "reviews", Namespace: "demo"}}})
	if err != nil {
		t.Fatal(err)
	}
	s.send(t, "v1", "n1", table)
	if ack := s.next(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ACK %v", ack)
	}
	addr := a.dns.server.Addrs()[0]
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	q := new(dns.Msg)
	q.SetQuestion("reviews.demo.svc.cluster.local.demo.svc.cluster.local.", dns.TypeA)
	resp, _, err := c.Exchange(q, addr)
	if err != nil || len(resp.Answer) != 2 || resp.Answer[1].(*dns.A).A.String() != "10.96.0.7" {
		t.Fatalf("search-path query: %v %v", resp, err)
	}
	q.SetQuestion("www.example.com.", dns.TypeA)
	if resp, _, err = c.Exchange(q, addr); err != nil || resp.Rcode != dns.RcodeNameError {
		t.Fatalf("forwarded query: %v %v; want the resolver's NXDOMAIN", resp, err)
	}
	srv := httptest.NewServer(a.StatusHandler())
	defer srv.Close()
	testwait.For(t, 10*time.Second, func() error {
		r, err := http.Get(srv.URL + "/debug/dns")
		if err != nil {
			return err
		}
		defer r.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, r.Body)
		for _, want := range []string{`"version": "v1"`, `"reviews.demo.svc.cluster.local"`, `"answered": 1`, `"forwarded": 1`, `"acks": 1`} {
			if !strings.Contains(b.String(), want) {
				return fmt.Errorf("/debug/dns lacks %s: %s", want, b.String())
			}
		}
		return nil
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
