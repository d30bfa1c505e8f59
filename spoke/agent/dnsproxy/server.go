package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
)

// Istio's numbers.
const (
	// Port is where the agent answers DNS (Istio's 15053), on 127.0.0.1
	// and, when the pod has an IPv6 resolver, ::1.
	Port = 15053
	// TTL is the time to live of an answer from the table, in seconds:
	// short, so that a client that honours it soon sees a new address.
	TTL = 30
	// DefaultTimeout bounds one exchange with one upstream resolver.
	DefaultTimeout = 5 * time.Second
	// ResolvConf is where the pod's resolvers and search path are.
	ResolvConf = "/etc/resolv.conf"
)

// Outcomes of a query (the outcome label of nave_agent_dns_queries_total).
const (
	// OutcomeAnswered: answered from the name table.
	OutcomeAnswered = "answered"
	// OutcomeForwarded: an upstream resolver answered (whatever its rcode).
	OutcomeForwarded = "forwarded"
	// OutcomeFailed: no upstream resolver answered; the agent answered
	// SERVFAIL (also a query without a question).
	OutcomeFailed = "failed"
)

// Options configure a Server. A plain value.
type Options struct {
	// Scope gives the table's short names (BuildTable).
	Scope Scope
	// Upstreams are the resolvers (host:port) names not in the table go
	// to, tried in order until one answers.
	Upstreams []string
	// Timeout bounds one exchange with one upstream (0: DefaultTimeout).
	Timeout time.Duration
	Log     *slog.Logger
	// Registerer receives the server's metrics (nil: unregistered).
	Registerer prometheus.Registerer
}

// OptionsFromResolvConf fills Upstreams and Scope.Search from a
// resolv.conf file, and says whether one of its resolvers is IPv6 (then
// the agent also listens on ::1, where an IPv6 query is redirected).
func OptionsFromResolvConf(path string, o Options) (Options, bool, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return o, false, fmt.Errorf("read %s: %w", path, err)
	}
	v6 := false
	o.Upstreams = nil
	for _, s := range cc.Servers {
		if a, err := netip.ParseAddr(s); err == nil && a.Unmap().Is6() {
			v6 = true
		}
		o.Upstreams = append(o.Upstreams, net.JoinHostPort(s, cc.Port))
	}
	o.Scope.Search = cc.Search
	return o, v6, nil
}

// Server is the agent's DNS proxy: it answers A and AAAA queries for the
// names of its table and forwards every other query, unchanged, to the
// pod's upstream resolvers; without a table (none received yet) it
// forwards everything. It never answers a name it does not know: an
// upstream's answer (NXDOMAIN, SERVFAIL…) is passed on as it is, and
// only when no upstream answers does it answer SERVFAIL. Its methods
// are safe for concurrent use; the table is swapped atomically.
type Server struct {
	o       Options
	log     *slog.Logger
	table   atomic.Pointer[Table]
	queries *prometheus.CounterVec
	hosts   prometheus.Gauge
	stamp   prometheus.Gauge
	updates prometheus.Counter
	counts  [3]atomic.Uint64 // answered, forwarded, failed

	mu      sync.Mutex
	servers []*dns.Server
	addrs   []string
}

// New makes a server with no table and no listener.
func New(o Options) *Server {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, log: o.Log,
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_agent_dns_queries_total",
			Help: "DNS queries the agent's DNS proxy handled, by outcome: answered (from the name table), forwarded (an upstream resolver answered), failed (no upstream answered: SERVFAIL)"}, []string{"outcome"}),
		hosts: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_agent_dns_table_hosts",
			Help: "hosts in the name table the DNS proxy answers from"}),
		stamp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_agent_dns_table_timestamp_seconds",
			Help: "when the name table in use was received from the hub (Unix time; 0: none yet)"}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_agent_dns_table_updates_total",
			Help: "name tables received from the hub and put in place"}),
	}
	for _, o := range []string{OutcomeAnswered, OutcomeForwarded, OutcomeFailed} {
		s.queries.WithLabelValues(o)
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.queries, s.hosts, s.stamp, s.updates)
	}
	return s
}

// Update builds the lookup table of nt and puts it in place of the last.
func (s *Server) Update(nt *ndsv1.NameTable, version string) {
	t := BuildTable(nt, s.o.Scope, version, time.Now())
	s.table.Store(t)
	s.hosts.Set(float64(t.Hosts))
	s.stamp.Set(float64(t.Received.UnixNano()) / 1e9)
	s.updates.Inc()
	s.log.Info("name table in place", "version", version, "hosts", t.Hosts, "names", t.Names())
}

// Table is the table in use; nil before the first.
func (s *Server) Table() *Table { return s.table.Load() }

// Listen binds UDP and TCP on each address (host:port); Serve then
// serves them.
func (s *Server) Listen(addrs ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range addrs {
		pc, l, err := ListenPair(a)
		if err != nil {
			s.closeLocked()
			return err
		}
		s.servers = append(s.servers, &dns.Server{PacketConn: pc, Handler: s}, &dns.Server{Listener: l, Handler: s})
		s.addrs = append(s.addrs, pc.LocalAddr().String())
	}
	return nil
}

// ListenPair binds UDP on addr and TCP on the same port, as a DNS server
// listens; with port 0 (tests) it tries other ports while the TCP port
// UDP got is taken.
func ListenPair(addr string) (net.PacketConn, net.Listener, error) {
	for attempt := 0; ; attempt++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns: listen udp %s: %w", addr, err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l, nil
		}
		pc.Close()
		if _, port, _ := net.SplitHostPort(addr); port != "0" || attempt == 20 {
			return nil, nil, fmt.Errorf("dns: listen tcp %s: %w", pc.LocalAddr(), err)
		}
	}
}

// closeLocked closes what Listen bound.
func (s *Server) closeLocked() {
	for _, srv := range s.servers {
		if srv.PacketConn != nil {
			srv.PacketConn.Close()
		}
		if srv.Listener != nil {
			srv.Listener.Close()
		}
	}
	s.servers, s.addrs = nil, nil
}

// Addrs are the addresses Listen bound (a port 0 resolved).
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.addrs...)
}

// Serve serves what Listen bound until ctx ends (nil) or a listener
// fails.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	servers := s.servers
	s.mu.Unlock()
	if len(servers) == 0 {
		return errors.New("dns: nothing to serve: Listen first")
	}
	errs := make(chan error, len(servers))
	for _, srv := range servers {
		go func() { errs <- srv.ActivateAndServe() }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
		err = fmt.Errorf("dns: serve: %w", err)
	}
	for _, srv := range servers {
		_ = srv.Shutdown() // a server that failed to start says so; nothing to do
	}
	return err
}

// ServeDNS answers one query (dns.Handler).
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	tcp := false
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		tcp = true
	}
	resp := s.Resolve(context.Background(), req, tcp)
	_ = w.WriteMsg(resp) // the client went away: nothing to tell it
}

// Resolve is the answer to req, received over TCP or UDP: from the table,
// else from an upstream resolver, else SERVFAIL; truncated to what the
// client can take (512 bytes over UDP, more with EDNS0).
func (s *Server) Resolve(ctx context.Context, req *dns.Msg, tcp bool) *dns.Msg {
	var resp *dns.Msg
	outcome := OutcomeForwarded
	switch {
	case len(req.Question) == 0 || req.Response || req.Opcode != dns.OpcodeQuery:
		outcome, resp = OutcomeFailed, reply(req, dns.RcodeServerFailure)
	default:
		if resp = s.answer(req); resp != nil {
			outcome = OutcomeAnswered
		} else if resp = s.forward(ctx, req); resp == nil {
			outcome, resp = OutcomeFailed, reply(req, dns.RcodeServerFailure)
		}
	}
	s.count(outcome)
	resp.Truncate(maxSize(req, tcp))
	return resp
}

// reply is an empty answer to req with rcode.
func reply(req *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	return m
}

// answer is the table's answer to an A or AAAA query for one of its
// names; nil for anything else (forwarded). A name of the table is
// answered NOERROR even without an address of the asked family, never
// NXDOMAIN (a client asking A and AAAA at once would take it for the
// whole name), as Istio does.
func (s *Server) answer(req *dns.Msg) *dns.Msg {
	q := req.Question[0]
	if q.Qclass != dns.ClassINET || (q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA) {
		return nil
	}
	t := s.table.Load()
	if t == nil {
		return nil
	}
	e, base := t.Lookup(strings.ToLower(q.Name))
	if e == nil {
		return nil
	}
	m := reply(req, dns.RcodeSuccess)
	m.Authoritative, m.RecursionAvailable = true, true
	name := q.Name
	if base > 0 {
		// The search-path form: a CNAME to the name it completes, then
		// that name's addresses (clients that do not chase a CNAME get
		// the addresses in the same answer).
		target := q.Name[:base]
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: TTL}, Target: target})
		name = target
	}
	ips := e.v4
	if q.Qtype == dns.TypeAAAA {
		ips = e.v6
	}
	start := len(m.Answer)
	for _, a := range ips {
		hdr := dns.RR_Header{Name: name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: TTL}
		if a.Is4() {
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		} else {
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	// Several addresses (a headless service) in a random order, as
	// kube-dns does, so that clients taking the first spread out.
	addrs := m.Answer[start:]
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	return m
}

// forward asks the upstream resolvers in turn: over UDP, again over TCP
// when the UDP answer is truncated. It returns the first answer; nil when
// none answered.
func (s *Server) forward(ctx context.Context, req *dns.Msg) *dns.Msg {
	for _, up := range s.o.Upstreams {
		resp, err := s.exchange(ctx, "udp", req, up)
		if err == nil && resp.Truncated {
			if full, terr := s.exchange(ctx, "tcp", req, up); terr == nil {
				resp = full
			} else {
				s.log.Debug("upstream over tcp failed: passing on the truncated answer", "upstream", up, "error", terr)
			}
		}
		if err == nil {
			return resp
		}
		s.log.Debug("upstream did not answer", "upstream", up, "name", req.Question[0].Name, "error", err)
	}
	return nil
}

// exchange asks one upstream over network.
func (s *Server) exchange(ctx context.Context, network string, req *dns.Msg, upstream string) (*dns.Msg, error) {
	c := &dns.Client{Net: network, Timeout: s.o.Timeout}
	if network == "udp" {
		// Room for whatever the upstream sends; the client's own limit
		// applies when the answer is passed on (Resolve).
		c.UDPSize = dns.DefaultMsgSize
	}
	resp, _, err := c.ExchangeContext(ctx, req, upstream)
	return resp, err
}

// maxSize is the largest answer the client of req takes: 64 KiB over TCP,
// its EDNS0 buffer size (at least 512) over UDP.
func maxSize(req *dns.Msg, tcp bool) int {
	if tcp {
		return dns.MaxMsgSize
	}
	size := dns.MinMsgSize
	if o := req.IsEdns0(); o != nil && int(o.UDPSize()) > size {
		size = int(o.UDPSize())
	}
	return size
}

// Counts are the queries handled since the start, by outcome.
func (s *Server) Counts() map[string]uint64 {
	return map[string]uint64{OutcomeAnswered: s.counts[0].Load(), OutcomeForwarded: s.counts[1].Load(), OutcomeFailed: s.counts[2].Load()}
}

// count records a query's outcome.
func (s *Server) count(outcome string) {
	s.queries.WithLabelValues(outcome).Inc()
	switch outcome {
	case OutcomeAnswered:
		s.counts[0].Add(1)
	case OutcomeForwarded:
		s.counts[1].Add(1)
	default:
		s.counts[2].Add(1)
	}
}

// Options are the server's options (its upstreams, its scope).
func (s *Server) Options() Options { return s.o }
