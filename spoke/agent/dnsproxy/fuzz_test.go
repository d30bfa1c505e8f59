package dnsproxy

import (
	"context"
	"testing"

	"github.com/miekg/dns"
)

// FuzzResolve feeds arbitrary messages to the proxy (with a table and no
// upstream, so that nothing leaves the process): whatever it gets, it
// answers with a message that packs, carries the query's id, fits the
// client's size and is NOERROR only for a table answer. Seeds are in
// testdata/fuzz/FuzzResolve besides those added here.
func FuzzResolve(f *testing.F) {
	for _, m := range []*dns.Msg{
		query("reviews.", dns.TypeA),
		query("reviews.ns1.svc.cluster.local.ns1.svc.cluster.local.", dns.TypeAAAA),
		query("a.b.wild.mesh.", dns.TypeA),
		query("www.example.com.", dns.TypeMX),
	} {
		m.SetEdns0(1232, false)
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	s := New(Options{Scope: testScope})
	s.Update(testTable(), "v1")
	f.Fuzz(func(t *testing.T, data []byte, tcp bool) {
		req := new(dns.Msg)
		if err := req.Unpack(data); err != nil {
			return // the dns server drops what does not parse
		}
		resp := s.Resolve(context.Background(), req, tcp)
		b, err := resp.Pack()
		if err != nil {
			t.Fatalf("the answer does not pack: %v", err)
		}
		if resp.Id != req.Id || !resp.Response {
			t.Fatalf("answer id %d response %v; want id %d, a response", resp.Id, resp.Response, req.Id)
		}
		if len(b) > maxSize(req, tcp) {
			t.Fatalf("answer of %d bytes; the client takes %d", len(b), maxSize(req, tcp))
		}
		if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeServerFailure {
			t.Fatalf("rcode %s: the proxy makes up only table answers and SERVFAIL", dns.RcodeToString[resp.Rcode])
		}
		if resp.Rcode == dns.RcodeSuccess && !resp.Authoritative {
			t.Fatal("NOERROR that is not a table answer: nothing was forwarded, so it was made up")
		}
	})
}
