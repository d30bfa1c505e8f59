package capture

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/navemesh/nave/internal/testenv"
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
	var servers []*dns.Server
	for _, addr := range args[2:] {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: l, Handler: h})
	}
	for _, s := range servers {
		go func() { _ = s.ActivateAndServe() }()
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
	c := &dns.Client{Net: args[1], Timeout: 2 * time.Second}
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
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to create network namespaces")
	}
	for _, prog := range []string{"ip", "iptables-restore", "ip6tables-restore"} {
		if _, err := exec.LookPath(prog); err != nil {
			testenv.Missing(t, "needs %s (apt-get install iproute2 iptables): %v", prog, err)
		}
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	pod, client := netns("nave-dns-"+id+"-p"), netns("nave-dns-"+id+"-c")
	if out, err := exec.Command("ip", "netns", "add", string(pod)).CombinedOutput(); err != nil {
		testenv.Missing(t, "cannot create a network namespace here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", string(pod)).Run() })
	ipCmd(t, "netns", "add", string(client))
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", string(client)).Run() })
	n := int(b[0])
	podIP, resolverIP, otherIP := fmt.Sprintf("10.251.%d.2", n), fmt.Sprintf("10.251.%d.1", n), fmt.Sprintf("10.251.%d.3", n)
	podIP6, resolverIP6 := fmt.Sprintf("fd4e:6177:%x::2", n), fmt.Sprintf("fd4e:6177:%x::1", n)
	podIf, clientIf := "nd"+id+"p", "nd"+id+"c"
	ipCmd(t, "link", "add", podIf, "type", "veth", "peer", "name", clientIf)
	ipCmd(t, "link", "set", podIf, "netns", string(pod))
	ipCmd(t, "link", "set", clientIf, "netns", string(client))
	for _, c := range [][]string{
		{"-n", string(pod), "addr", "add", podIP + "/24", "dev", podIf},
		{"-n", string(pod), "addr", "add", podIP6 + "/64", "dev", podIf, "nodad"},
		{"-n", string(pod), "link", "set", podIf, "up"},
		{"-n", string(pod), "link", "set", "lo", "up"},
		{"-n", string(client), "addr", "add", resolverIP + "/24", "dev", clientIf},
		{"-n", string(client), "addr", "add", otherIP + "/24", "dev", clientIf},
		{"-n", string(client), "addr", "add", resolverIP6 + "/64", "dev", clientIf, "nodad"},
		{"-n", string(client), "link", "set", clientIf, "up"},
		{"-n", string(client), "link", "set", "lo", "up"},
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
