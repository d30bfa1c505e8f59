package capture

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/navemesh/nave/internal/dnstest"
	"github.com/navemesh/nave/internal/testwait"
)

// dnsServe is the dnsserve helper: DNS servers answering NAME.
func dnsServe(args []string) int {
	uid, _ := strconv.Atoi(args[0])
	name := args[1]
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{name}}}
		_ = w.WriteMsg(m)
	})
	// As uid from the start: the owner the rules match is the socket's,
	// its creator's (nave-agent runs as 1337 from its start).
	if err := becomeUID(uid); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	for _, addr := range args[2:] {
		pc, l, err := dnstest.Listen(addr)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		dnstest.Start(pc, l, h)
	}
	fmt.Println("ready")
	select {}
}

// dnsQuery is the dnsquery helper.
func dnsQuery(args []string) int {
	uid, _ := strconv.Atoi(args[0])
	if err := becomeUID(uid); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	m := new(dns.Msg)
	m.SetQuestion("probe.test.", dns.TypeTXT)
	// Every query is answered: the timeout only ends a hang.
	c := &dns.Client{Net: args[1], Timeout: testwait.Timeout}
	resp, _, err := c.Exchange(m, args[2])
	if err != nil {
		fmt.Println("error:", err)
		return 0
	}
	if len(resp.Answer) != 1 {
		fmt.Println("error: answers", resp.Answer)
		return 0
	}
	fmt.Println(strings.Join(resp.Answer[0].(*dns.TXT).Txt, ""))
	return 0
}

// TestDNSCaptureInNetworkNamespace applies the capture with DNS capture
// through Main and the real iptables-restore in a pod's network namespace
// whose resolver is in a client's namespace across a veth pair, and checks
// who answers each DNS query: the agent (a server on 127.0.0.1 and ::1
// port 15053 running as uid 1337, as nave-agent does) for the app's
// queries to the resolver over UDP and TCP, the resolver itself for the
// proxy's own queries and for queries to another server. It needs root,
// ip and iptables-restore; without them it is skipped (fails in CI,
// internal/testenv).
func TestDNSCaptureInNetworkNamespace(t *testing.T) {
	pod, client, n, podIf, clientIf := podAndClient(t, "dns")
	podIP, resolverIP, otherIP := fmt.Sprintf("10.251.%d.2", n), fmt.Sprintf("10.251.%d.1", n), fmt.Sprintf("10.251.%d.3", n)
	podIP6, resolverIP6 := fmt.Sprintf("fd4e:6177:%x::2", n), fmt.Sprintf("fd4e:6177:%x::1", n)
	for _, c := range [][]string{
		{"-n", string(pod), "addr", "add", podIP + "/24", "dev", podIf},
		{"-n", string(pod), "addr", "add", podIP6 + "/64", "dev", podIf, "nodad"},
		{"-n", string(pod), "link", "set", podIf, "up"},
		{"-n", string(client), "addr", "add", resolverIP + "/24", "dev", clientIf},
		{"-n", string(client), "addr", "add", otherIP + "/24", "dev", clientIf},
		{"-n", string(client), "addr", "add", resolverIP6 + "/64", "dev", clientIf, "nodad"},
		{"-n", string(client), "link", "set", clientIf, "up"},
	} {
		ipCmd(t, c...)
	}
	// The pod's resolv.conf names the resolver (both families).
	conf := t.TempDir() + "/resolv.conf"
	if err := os.WriteFile(conf, []byte("nameserver "+resolverIP+"\nnameserver "+resolverIP6+"\nsearch ns1.svc.cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.RedirectDNS = true
	out := pod.run(t, "capture", append(c.Args(), "--resolv-conf="+conf)...)
	if !strings.Contains(out, "ipv4 rules installed") || !strings.Contains(out, "ipv6 rules installed") {
		t.Fatalf("capture: %s", out)
	}
	pod.startHelper(t, "dnsserve", "1337", "agent", "127.0.0.1:15053", "[::1]:15053")
	pod.serve(t, "outbound=15001")
	client.startHelper(t, "dnsserve", "0", "resolver", ":53")

	for _, tc := range []struct {
		name, network string
		uid           int
		addr, want    string
	}{
		{"the app's UDP query goes to the agent", "udp", 0, resolverIP + ":53", "agent"},
		{"the app's TCP query goes to the agent", "tcp", 0, resolverIP + ":53", "agent"},
		{"another uid's query too", "udp", 1000, resolverIP + ":53", "agent"},
		{"the proxy's own UDP query goes to the resolver", "udp", 1337, resolverIP + ":53", "resolver"},
		{"the proxy's own TCP query goes to the resolver", "tcp", 1337, resolverIP + ":53", "resolver"},
		{"a UDP query to another server goes out", "udp", 0, otherIP + ":53", "resolver"},
		{"IPv6: the app's UDP query goes to the agent", "udp", 0, "[" + resolverIP6 + "]:53", "agent"},
		{"IPv6: the app's TCP query goes to the agent", "tcp", 0, "[" + resolverIP6 + "]:53", "agent"},
		{"IPv6: the proxy's own query goes to the resolver", "udp", 1337, "[" + resolverIP6 + "]:53", "resolver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pod.run(t, "dnsquery", strconv.Itoa(tc.uid), tc.network, tc.addr); got != tc.want {
				t.Errorf("%s query to %s as uid %d: %q, want %q", tc.network, tc.addr, tc.uid, got, tc.want)
			}
		})
	}
	// A TCP query to another server is outbound TCP like any: Envoy's.
	if got := pod.run(t, "dial", "0", otherIP+":53"); got != "outbound" {
		t.Errorf("TCP to another server's port 53: %q, want Envoy's outbound port", got)
	}
}
