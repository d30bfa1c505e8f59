package dnsproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
)

// testTable is a mesh's name table as the hub sends it to a pod of ns1.
func testTable() *ndsv1.NameTable {
	k8s := func(name, ns string, ips ...string) *ndsv1.NameTable_NameInfo {
		return &ndsv1.NameTable_NameInfo{Ips: ips, Registry: RegistryKubernetes, Shortname: name, Namespace: ns}
	}
	return &ndsv1.NameTable{Table: map[string]*ndsv1.NameTable_NameInfo{
		"reviews.ns1.svc.cluster.local":  k8s("reviews", "ns1", "10.0.0.1", "fd00::1"),
		"ratings.ns2.svc.cluster.local":  k8s("ratings", "ns2", "10.0.0.2"),
		"headless.ns1.svc.cluster.local": k8s("headless", "ns1", "10.1.0.1", "10.1.0.2", "10.1.0.3"),
		"db.example.mesh":                {Ips: []string{"240.240.0.7"}, Registry: "External"},
		"*.wild.mesh":                    {Ips: []string{"240.240.0.8"}, Registry: "External"},
		"broken.example.mesh":            {Ips: []string{"not-an-ip"}, Registry: "External"},
		"v6only.example.mesh":            {Ips: []string{"2001:db8::9"}, Registry: "External", AltHosts: []string{"v6.alias"}},
		// Its short form "reviews.ns1" must not shadow this host's own name.
		"reviews.ns1": {Ips: []string{"240.240.0.9"}, Registry: "External"},
	}}
}

var testScope = Scope{Namespace: "ns1", DomainSuffix: "cluster.local", Search: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}}

// upstream is a test resolver on loopback (UDP and TCP): it answers
// "big.test." with 40 A records (truncated, TC set, over UDP), "fail.test."
// with SERVFAIL, "up.test." with 192.0.2.1 and everything else NXDOMAIN;
// it counts the queries it got.
type upstream struct {
	addr    string
	queries atomic.Int64
	tcp     atomic.Int64
}

func startUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		u.queries.Add(1)
		_, tcp := w.RemoteAddr().(*net.TCPAddr)
		if tcp {
			u.tcp.Add(1)
		}
		m := new(dns.Msg)
		m.SetReply(r)
		switch name := strings.ToLower(r.Question[0].Name); name {
		case "big.test.":
			if !tcp {
				m.Truncated = true
				break
			}
			for i := range 40 {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, byte(i+1))})
			}
		case "fail.test.":
			m.Rcode = dns.RcodeServerFailure
		case "up.test.":
			if r.Question[0].Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)})
			}
		default:
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	// Served as internal/dnstest does (which imports this package).
	pc, l, err := ListenPair("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = pc.LocalAddr().String()
	servers := []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}}
	for _, s := range servers {
		go func() { _ = s.ActivateAndServe() }()
	}
	t.Cleanup(func() {
		for _, s := range servers {
			_ = s.Shutdown()
		}
	})
	return u
}

// deadAddr is a loopback UDP address nothing listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := pc.LocalAddr().String()
	pc.Close()
	return a
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

// answers renders an answer section as "NAME TYPE DATA" lines, sorted.
func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, r.Hdr.Name+" A "+r.A.String())
		case *dns.AAAA:
			out = append(out, r.Hdr.Name+" AAAA "+r.AAAA.String())
		case *dns.CNAME:
			out = append(out, r.Hdr.Name+" CNAME "+r.Target)
		default:
			out = append(out, rr.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestAnswersFromTheTable(t *testing.T) {
	up := startUpstream(t)
	s := New(Options{Scope: testScope, Upstreams: []string{up.addr}, Timeout: 2 * time.Second})
	s.Update(testTable(), "v1")
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		want  []string // nil: forwarded (the upstream answers NXDOMAIN)
	}{
		{"reviews.ns1.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"reviews.ns1.svc.cluster.local. A 10.0.0.1"}},
		{"reviews.ns1.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, []string{"reviews.ns1.svc.cluster.local. AAAA fd00::1"}},
		{"ReViEwS.NS1.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"ReViEwS.NS1.svc.cluster.local. A 10.0.0.1"}},
		// Short forms of a service in the pod's namespace.
		{"reviews.", dns.TypeA, dns.RcodeSuccess, []string{"reviews. A 10.0.0.1"}},
		{"reviews.ns1.svc.", dns.TypeA, dns.RcodeSuccess, []string{"reviews.ns1.svc. A 10.0.0.1"}},
		// A host's own name is not shadowed by another host's short form.
		{"reviews.ns1.", dns.TypeA, dns.RcodeSuccess, []string{"reviews.ns1. A 240.240.0.9"}},
		// Another namespace: name.namespace, not the bare name.
		{"ratings.ns2.", dns.TypeA, dns.RcodeSuccess, []string{"ratings.ns2. A 10.0.0.2"}},
		{"ratings.", dns.TypeA, dns.RcodeNameError, nil},
		// The stub resolver's search path: the first, and a later, domain.
		{"reviews.ns1.svc.cluster.local.ns1.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{
			"reviews.ns1.svc.cluster.local. A 10.0.0.1", "reviews.ns1.svc.cluster.local.ns1.svc.cluster.local. CNAME reviews.ns1.svc.cluster.local."}},
		{"ratings.ns2.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"ratings.ns2.svc.cluster.local. A 10.0.0.2"}},
		{"db.example.mesh.ns1.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{
			"db.example.mesh. A 240.240.0.7", "db.example.mesh.ns1.svc.cluster.local. CNAME db.example.mesh."}},
		{"db.example.mesh.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{
			"db.example.mesh. A 240.240.0.7", "db.example.mesh.cluster.local. CNAME db.example.mesh."}},
		// A and AAAA split: a known name without an address of the family
		// is NOERROR with no answer, never NXDOMAIN.
		{"db.example.mesh.", dns.TypeAAAA, dns.RcodeSuccess, []string{}},
		{"v6only.example.mesh.", dns.TypeA, dns.RcodeSuccess, []string{}},
		{"v6only.example.mesh.", dns.TypeAAAA, dns.RcodeSuccess, []string{"v6only.example.mesh. AAAA 2001:db8::9"}},
		{"v6.alias.", dns.TypeAAAA, dns.RcodeSuccess, []string{"v6.alias. AAAA 2001:db8::9"}},
		// Wildcards answer for the name asked.
		{"api.wild.mesh.", dns.TypeA, dns.RcodeSuccess, []string{"api.wild.mesh. A 240.240.0.8"}},
		{"a.b.wild.mesh.", dns.TypeA, dns.RcodeSuccess, []string{"a.b.wild.mesh. A 240.240.0.8"}},
		{"wild.mesh.", dns.TypeA, dns.RcodeNameError, nil},
		// Headless: every address.
		{"headless.", dns.TypeA, dns.RcodeSuccess, []string{"headless. A 10.1.0.1", "headless. A 10.1.0.2", "headless. A 10.1.0.3"}},
		// Not answered from the table: forwarded.
		{"broken.example.mesh.", dns.TypeA, dns.RcodeNameError, nil},
		{"reviews.ns1.svc.cluster.local.", dns.TypeTXT, dns.RcodeNameError, nil},
		{"www.example.com.", dns.TypeA, dns.RcodeNameError, nil},
	} {
		t.Run(fmt.Sprintf("%s %s", tc.name, dns.TypeToString[tc.qtype]), func(t *testing.T) {
			before := up.queries.Load()
			resp := s.Resolve(context.Background(), query(tc.name, tc.qtype), false)
			forwarded := up.queries.Load() != before
			if resp.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tc.rcode])
			}
			if tc.want == nil {
				if !forwarded {
					t.Errorf("answered %v; want the query forwarded", answers(resp))
				}
				return
			}
			if forwarded {
				t.Error("forwarded; want the table's answer")
			}
			if got := answers(resp); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("answers %q, want %q", got, tc.want)
			}
			if !resp.Authoritative {
				t.Error("not authoritative")
			}
			for _, rr := range resp.Answer {
				if rr.Header().Ttl != TTL {
					t.Errorf("TTL %d, want %d", rr.Header().Ttl, TTL)
				}
			}
		})
	}
	if got := s.Counts(); got[OutcomeFailed] != 0 || got[OutcomeAnswered] == 0 || got[OutcomeForwarded] != 5 {
		t.Errorf("counts %v; want 5 forwarded, the rest answered, none failed", got)
	}
}

func TestBeforeATableEverythingIsForwarded(t *testing.T) {
	up := startUpstream(t)
	s := New(Options{Scope: testScope, Upstreams: []string{up.addr}})
	if resp := s.Resolve(context.Background(), query("reviews.", dns.TypeA), false); resp.Rcode != dns.RcodeNameError || up.queries.Load() != 1 {
		t.Fatalf("rcode %s after %d upstream queries; want the upstream's NXDOMAIN", dns.RcodeToString[resp.Rcode], up.queries.Load())
	}
	s.Update(testTable(), "v1")
	if resp := s.Resolve(context.Background(), query("reviews.", dns.TypeA), false); len(resp.Answer) != 1 || up.queries.Load() != 1 {
		t.Fatalf("after the table: %v; want the table's answer", answers(resp))
	}
	// A new table replaces the last whole.
	s.Update(&ndsv1.NameTable{}, "v2")
	if resp := s.Resolve(context.Background(), query("reviews.", dns.TypeA), false); resp.Rcode != dns.RcodeNameError || up.queries.Load() != 2 {
		t.Fatalf("after an empty table: %s; want forwarded", dns.RcodeToString[resp.Rcode])
	}
	if v := s.Table().Version; v != "v2" {
		t.Errorf("table version %q", v)
	}
}

func TestForwarding(t *testing.T) {
	up := startUpstream(t)
	dead := deadAddr(t)
	s := New(Options{Scope: testScope, Upstreams: []string{dead, up.addr}, Timeout: 2 * time.Second})
	s.Update(testTable(), "v1")
	ctx := context.Background()

	t.Run("the first upstream down: the next answers", func(t *testing.T) {
		resp := s.Resolve(ctx, query("up.test.", dns.TypeA), false)
		if got := answers(resp); resp.Rcode != dns.RcodeSuccess || !slices.Equal(got, []string{"up.test. A 192.0.2.1"}) {
			t.Fatalf("%s %v", dns.RcodeToString[resp.Rcode], got)
		}
	})
	t.Run("an upstream's SERVFAIL and NXDOMAIN are passed on", func(t *testing.T) {
		if resp := s.Resolve(ctx, query("fail.test.", dns.TypeA), false); resp.Rcode != dns.RcodeServerFailure {
			t.Errorf("fail.test: %s", dns.RcodeToString[resp.Rcode])
		}
		if resp := s.Resolve(ctx, query("nothing.test.", dns.TypeA), false); resp.Rcode != dns.RcodeNameError {
			t.Errorf("nothing.test: %s", dns.RcodeToString[resp.Rcode])
		}
	})
	t.Run("truncated over UDP: asked again over TCP", func(t *testing.T) {
		tcpBefore := up.tcp.Load()
		// The client over TCP takes it all.
		if resp := s.Resolve(ctx, query("big.test.", dns.TypeA), true); len(resp.Answer) != 40 || resp.Truncated {
			t.Errorf("over TCP: %d answers (truncated %v); want 40", len(resp.Answer), resp.Truncated)
		}
		// A UDP client with EDNS0 4096 too.
		q := query("big.test.", dns.TypeA)
		q.SetEdns0(4096, false)
		if resp := s.Resolve(ctx, q, false); len(resp.Answer) != 40 || resp.Truncated {
			t.Errorf("over UDP with EDNS0: %d answers (truncated %v); want 40", len(resp.Answer), resp.Truncated)
		}
		// A plain UDP client gets what fits in 512 bytes, marked truncated.
		resp := s.Resolve(ctx, query("big.test.", dns.TypeA), false)
		if b, _ := resp.Pack(); !resp.Truncated || len(b) > dns.MinMsgSize {
			t.Errorf("over plain UDP: %d bytes, truncated %v; want at most 512, truncated", len(b), resp.Truncated)
		}
		if up.tcp.Load()-tcpBefore != 3 {
			t.Errorf("%d queries over TCP upstream; want 3", up.tcp.Load()-tcpBefore)
		}
	})
	t.Run("every upstream down: SERVFAIL, counted failed", func(t *testing.T) {
		down := New(Options{Scope: testScope, Upstreams: []string{dead}, Timeout: 2 * time.Second})
		down.Update(testTable(), "v1")
		resp := down.Resolve(ctx, query("www.example.com.", dns.TypeA), false)
		if resp.Rcode != dns.RcodeServerFailure || down.Counts()[OutcomeFailed] != 1 {
			t.Fatalf("%s, counts %v; want SERVFAIL, one failed", dns.RcodeToString[resp.Rcode], down.Counts())
		}
		// The table still answers what it knows.
		if resp := down.Resolve(ctx, query("reviews.", dns.TypeA), false); len(resp.Answer) != 1 {
			t.Errorf("reviews.: %v", answers(resp))
		}
	})
	t.Run("no question: SERVFAIL", func(t *testing.T) {
		m := new(dns.Msg)
		m.Id = 7
		if resp := s.Resolve(ctx, m, false); resp.Rcode != dns.RcodeServerFailure || resp.Id != 7 {
			t.Errorf("%s id %d", dns.RcodeToString[resp.Rcode], resp.Id)
		}
	})
}

// TestServesUDPAndTCP serves on loopback and resolves through it with a
// real client of each protocol and with Go's own resolver.
func TestServesUDPAndTCP(t *testing.T) {
	up := startUpstream(t)
	s := New(Options{Scope: testScope, Upstreams: []string{up.addr}})
	s.Update(testTable(), "v1")
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	addr := s.Addrs()[0]
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Timeout: 5 * time.Second}
		resp, _, err := c.Exchange(query("reviews.ns1.svc.cluster.local.", dns.TypeA), addr)
		if err != nil || len(resp.Answer) != 1 {
			t.Fatalf("%s: %v %v", network, resp, err)
		}
		resp, _, err = c.Exchange(query("up.test.", dns.TypeA), addr)
		if err != nil || len(resp.Answer) != 1 {
			t.Fatalf("%s forwarded: %v %v", network, resp, err)
		}
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	ips, err := r.LookupNetIP(context.Background(), "ip", "headless.ns1.svc.cluster.local")
	if err != nil || len(ips) != 3 {
		t.Fatalf("Go's resolver: %v %v", ips, err)
	}
	if _, err := r.LookupNetIP(context.Background(), "ip4", "nothing.test"); err == nil || !err.(*net.DNSError).IsNotFound {
		t.Errorf("nothing.test: %v; want not found (the upstream's NXDOMAIN)", err)
	}
	if ips, err := r.LookupNetIP(context.Background(), "ip6", "reviews.ns1.svc.cluster.local"); err != nil || !slices.Equal(ips, []netip.Addr{netip.MustParseAddr("fd00::1")}) {
		t.Errorf("AAAA: %v %v", ips, err)
	}
}

func TestOptionsFromResolvConf(t *testing.T) {
	path := t.TempDir() + "/resolv.conf"
	writeFile(t, path, "nameserver 10.96.0.10\nnameserver fd00::a\nsearch ns1.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n")
	o, v6, err := OptionsFromResolvConf(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !v6 || !slices.Equal(o.Upstreams, []string{"10.96.0.10:53", "[fd00::a]:53"}) || !slices.Equal(o.Scope.Search, testScope.Search) {
		t.Errorf("%+v v6=%v", o, v6)
	}
	if _, _, err := OptionsFromResolvConf(path+".missing", Options{}); err == nil {
		t.Error("a missing file: no error")
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
