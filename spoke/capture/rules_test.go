package capture

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/ from the rules' current output")

func configs() map[string]Config {
	annotated := Default()
	annotated.InboundAllPorts, annotated.InboundPorts = false, []int{8080, 9080}
	annotated.ExcludeInboundPorts = []int{8081, 15000, 15021}
	annotated.ExcludeOutboundPorts = []int{5432, 6379}
	annotated.OutboundAllRanges = false
	annotated.OutboundRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	annotated.ExcludeOutboundRanges = []netip.Prefix{netip.MustParsePrefix("10.96.0.1/32"), netip.MustParsePrefix("fd00::1/128")}
	excluded := Default()
	excluded.ExcludeInboundPorts = []int{15000, 15021}
	excluded.ExcludeOutboundRanges = []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}
	dns := Default()
	dns.RedirectDNS = true
	dns.DNSServers = []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::a")}
	dnsAll := Default()
	dnsAll.RedirectDNS, dnsAll.CaptureAllDNS, dnsAll.DNSPort = true, true, 15054
	return map[string]Config{"default": Default(), "annotated": annotated, "excluded": excluded, "dns": dns, "dns-all": dnsAll}
}

// TestRulesGolden compares the rules of each config and family with
// testdata/golden (go test -run TestRulesGolden -update rewrites them).
func TestRulesGolden(t *testing.T) {
	for name, c := range configs() {
		for _, f := range []Family{IPv4, IPv6} {
			got := Rules(c, f)
			path := filepath.Join("testdata", "golden", name+"-"+f.String()+".rules")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the rules (rerun with -update if the change is meant):\n%s", path, got)
			}
		}
	}
}

// TestRulesSemantics checks what the rules must say, whatever their
// order of presentation.
func TestRulesSemantics(t *testing.T) {
	c := configs()["annotated"]
	v4, v6 := Rules(c, IPv4), Rules(c, IPv6)
	for _, want := range []string{
		"-A NAVE_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006",
		"-A NAVE_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
		"-A NAVE_OUTPUT -m owner --uid-owner 1337 -j RETURN",
		"-A NAVE_OUTPUT -m owner --gid-owner 1337 -j RETURN",
		"-A NAVE_OUTPUT -d 127.0.0.1/32 -j RETURN",
		"-A NAVE_OUTPUT -p tcp --dport 5432 -j RETURN",
		"-A NAVE_OUTPUT -d 10.96.0.1/32 -j RETURN",
		"-A NAVE_OUTPUT -d 10.0.0.0/8 -j NAVE_REDIRECT",
		"-A NAVE_INBOUND -p tcp --dport 8081 -j RETURN",
		"-A NAVE_INBOUND -p tcp --dport 9080 -j NAVE_IN_REDIRECT",
	} {
		if !strings.Contains(v4, want+"\n") {
			t.Errorf("IPv4 rules lack %q", want)
		}
	}
	if strings.Contains(v4, "fd00") || strings.Contains(v6, "10.0.0.0") || !strings.Contains(v6, "-A NAVE_OUTPUT -d fd00::/8 -j NAVE_REDIRECT\n") ||
		!strings.Contains(v6, "-A NAVE_OUTPUT -d ::1/128 -j RETURN\n") {
		t.Error("a family's rules hold the other family's addresses, or lack their own")
	}
	// Exclusions come before the redirect they except from.
	if strings.Index(v4, "--dport 5432 -j RETURN") > strings.Index(v4, "-j NAVE_REDIRECT\n") ||
		strings.Index(v4, "--uid-owner 1337 -j RETURN") > strings.Index(v4, "-j NAVE_REDIRECT\n") {
		t.Error("an exclusion follows the outbound redirect")
	}
	if !strings.HasSuffix(v4, "COMMIT\n") || !strings.Contains(v4, "\n*nat\n") {
		t.Error("not one nat table committed")
	}
}

// TestDNSRulesSemantics checks DNS capture: port 53 to the pod's resolvers
// goes to the DNS port, the proxy's own queries go out, and the rest of
// the capture is as without it.
func TestDNSRulesSemantics(t *testing.T) {
	c := configs()["dns"]
	v4, v6 := Rules(c, IPv4), Rules(c, IPv6)
	for _, want := range []string{
		"-A OUTPUT -p udp --dport 53 -j NAVE_DNS",
		"-A NAVE_OUTPUT -p tcp --dport 53 -j NAVE_DNS",
		"-A NAVE_DNS -m owner --uid-owner 1337 -j RETURN",
		"-A NAVE_DNS -m owner --gid-owner 1337 -j RETURN",
		"-A NAVE_DNS -d 10.96.0.10/32 -p udp --dport 53 -j REDIRECT --to-ports 15053",
		"-A NAVE_DNS -d 10.96.0.10/32 -p tcp --dport 53 -j REDIRECT --to-ports 15053",
		"-A NAVE_OUTPUT -o lo -p tcp ! --dport 53 -m owner ! --uid-owner 1337 -j RETURN",
		"-A NAVE_DNS_CT_OUT -p udp --dport 53 -m owner --uid-owner 1337 -j CT --zone 1",
		"-A NAVE_DNS_CT_OUT -d 10.96.0.10/32 -p udp --dport 53 -j CT --zone 2",
		"-A NAVE_DNS_CT_IN -s 10.96.0.10/32 -p udp --sport 53 -j CT --zone 1",
	} {
		if !strings.Contains(v4, want+"\n") {
			t.Errorf("IPv4 rules lack %q", want)
		}
	}
	if !strings.Contains(v6, "-A NAVE_DNS -d fd00::a/128 -p udp --dport 53 -j REDIRECT --to-ports 15053\n") || strings.Contains(v6, "10.96.0.10") || strings.Contains(v4, "fd00::a") {
		t.Error("a family's DNS rules hold the other family's resolvers, or lack their own")
	}
	// The proxy's own queries are returned before any redirect, and TCP
	// reaches the DNS chain after the proxy's exclusions.
	if strings.Index(v4, "-A NAVE_DNS -m owner --uid-owner 1337 -j RETURN") > strings.Index(v4, "-j REDIRECT --to-ports 15053") ||
		strings.Index(v4, "-A NAVE_OUTPUT -m owner --gid-owner 1337 -j RETURN") > strings.Index(v4, "-A NAVE_OUTPUT -p tcp --dport 53 -j NAVE_DNS") ||
		strings.Index(v4, "-A NAVE_OUTPUT -p tcp --dport 53 -j NAVE_DNS") > strings.Index(v4, "-A NAVE_OUTPUT -d 127.0.0.1/32 -j RETURN") {
		t.Error("DNS rules out of order")
	}
	if !strings.Contains(v4, "\n*raw\n") || strings.Count(v4, "COMMIT\n") != 2 {
		t.Error("not a nat and a raw table")
	}
	// A family without a resolver captures no DNS.
	only4 := c
	only4.DNSServers = c.DNSServers[:1]
	if got, want := Rules(only4, IPv6), Rules(Default(), IPv6); got != want {
		t.Errorf("IPv6 rules without an IPv6 resolver:\n%s\nwant those without DNS capture:\n%s", got, want)
	}
	all := Rules(configs()["dns-all"], IPv6)
	if !strings.Contains(all, "-A NAVE_DNS -p udp --dport 53 -j REDIRECT --to-ports 15054\n") || !strings.Contains(all, "-A NAVE_DNS_CT_IN -p udp --sport 53 -j CT --zone 1\n") {
		t.Errorf("--capture-all-dns rules:\n%s", all)
	}
	// Without DNS capture, nothing of it.
	off := c
	off.RedirectDNS = false
	if got := Rules(off, IPv4); got != Rules(Default(), IPv4) {
		t.Error("resolvers without --redirect-dns changed the rules")
	}
}

// TestMainReadsResolvConf: with --redirect-dns and no --dns-servers, the
// resolvers are resolv.conf's; with none there, DNS is not captured and
// the rest is.
func TestMainReadsResolvConf(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver 10.96.0.10\nnameserver fd00::a\nsearch ns.svc.cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"--redirect-dns", "--resolv-conf=" + conf, "--dry-run", "--ipv6=true"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want := configs()["dns"]
	if out.String() != Rules(want, IPv4)+Rules(want, IPv6) {
		t.Errorf("dry run printed\n%s", out.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"--redirect-dns", "--resolv-conf=" + filepath.Join(dir, "none"), "--dry-run", "--ipv6=false"}, &out, &errOut); code != 0 ||
		out.String() != Rules(Default(), IPv4) || !strings.Contains(errOut.String(), "DNS is not captured") {
		t.Errorf("without resolvers: exit %d, %q; want the rules without DNS, and a warning", code, errOut.String())
	}
}

func TestArgsRoundTrip(t *testing.T) {
	for name, c := range configs() {
		got, err := ParseArgs(c.Args())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("%s: %v parses to %+v, want %+v", name, c.Args(), got, c)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--exclude-outbound-ports=80,x"}, `"x" is not a port`},
		{[]string{"--include-inbound-ports=0"}, `"0" is not a port`},
		{[]string{"--exclude-outbound-ranges=10.0.0.0/40"}, `"10.0.0.0/40" is not a CIDR`},
		{[]string{"--include-outbound-ranges=fe80::1%eth0"}, "is not a CIDR"},
		{[]string{"--inbound-port=15001"}, "both 15001"},
		{[]string{"--proxy-uid=-1"}, "must not be negative"},
		{[]string{"--outbound-port=70000"}, "70000 is not a port"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--dns-servers=10.0.0.1,nope"}, `"nope" is not an IP address`},
		{[]string{"--dns-port=15001"}, "the DNS port 15001 is also a TCP capture port"},
	} {
		if _, err := ParseArgs(tc.args); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.says)
		}
	}
	if ps, err := ParsePorts(" 80, ,443,80 "); err != nil || !reflect.DeepEqual(ps, []int{80, 443}) {
		t.Errorf("ParsePorts: %v %v, want [80 443]", ps, err)
	}
	if rs, err := ParseRanges("10.1.2.3, 10.0.0.0/8, 10.1.2.3/32"); err != nil || len(rs) != 2 || rs[1].String() != "10.1.2.3/32" {
		t.Errorf("ParseRanges: %v %v, want 10.0.0.0/8 and 10.1.2.3/32", rs, err)
	}
}

// TestMainDryRun runs the command's flag handling: --dry-run prints the
// rules of the flags; bad flags exit 2 saying why.
func TestMainDryRun(t *testing.T) {
	var out, errOut bytes.Buffer
	c := configs()["annotated"]
	if code := run(append(c.Args(), "--dry-run", "--ipv6=true"), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if want := Rules(c, IPv4) + Rules(c, IPv6); out.String() != want {
		t.Errorf("dry run printed\n%s\nwant\n%s", out.String(), want)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--ipv6=maybe", "--dry-run"}, `--ipv6 "maybe"`},
		{[]string{"--exclude-inbound-ports=http"}, `"http" is not a port`},
		{[]string{"--inbound-port=1", "--outbound-port=1"}, "both 1"},
		{[]string{"--dry-run", "more"}, `unexpected argument "more"`},
		{nil, "no flags given"},
	} {
		out.Reset()
		errOut.Reset()
		if code := run(tc.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.says) {
			t.Errorf("%v: exit %d %q, want 2 saying %q", tc.args, code, errOut.String(), tc.says)
		}
	}
	errOut.Reset()
	if code := run([]string{"--ipv6=false", "--iptables-restore=/nonexistent/iptables-restore"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "/nonexistent/iptables-restore") {
		t.Errorf("a missing iptables-restore: exit %d %q, want 1 naming it", code, errOut.String())
	}
}

// FuzzParseLists feeds arbitrary annotation values to the port and CIDR
// parsers: they return a sorted list of valid items or an error, and what
// they return prints back to itself. Seeds live in
// testdata/fuzz/FuzzParseLists.
func FuzzParseLists(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		if ps, err := ParsePorts(s); err == nil {
			again, err := ParsePorts(joinPorts(ps))
			if err != nil || !reflect.DeepEqual(again, ps) && len(ps) > 0 {
				t.Fatalf("ports %v print as %q, which parses to %v %v", ps, joinPorts(ps), again, err)
			}
			for _, p := range ps {
				if p < 1 || p > 65535 {
					t.Fatalf("port %d accepted", p)
				}
			}
		}
		if rs, err := ParseRanges(s); err == nil {
			again, err := ParseRanges(joinRanges(rs))
			if err != nil || !reflect.DeepEqual(again, rs) && len(rs) > 0 {
				t.Fatalf("ranges %v print as %q, which parses to %v %v", rs, joinRanges(rs), again, err)
			}
		}
	})
}
