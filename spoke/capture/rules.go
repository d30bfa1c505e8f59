package capture

import (
	"fmt"
	"net/netip"
	"strings"
)

// Chains of the nat table the rules own.
const (
	chainInbound    = "NAVE_INBOUND"
	chainInRedirect = "NAVE_IN_REDIRECT"
	chainOutput     = "NAVE_OUTPUT"
	chainRedirect   = "NAVE_REDIRECT"
	// DNS capture (Config.RedirectDNS): the nat chain that redirects port
	// 53 to the agent, and the raw chains that keep the agent's queries
	// upstream and the app's queries to the agent in conntrack zones of
	// their own (1 and 2), as Istio's do: else an app's query and the
	// agent's query upstream from the same source port could share a
	// conntrack entry, and the agent's query be redirected to itself.
	chainDNS      = "NAVE_DNS"
	chainDNSCTOut = "NAVE_DNS_CT_OUT"
	chainDNSCTIn  = "NAVE_DNS_CT_IN"
)

// Family is the IP family of a rule set.
type Family int

// The two families: iptables-restore and ip6tables-restore input.
const (
	IPv4 Family = iota
	IPv6
)

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// loopback is the family's loopback address; inboundPassthrough is the
// source address Envoy uses for inbound passthrough connections to the
// app (Istio's 127.0.0.6 and ::6), which must not be captured again.
func (f Family) loopback() netip.Prefix {
	if f == IPv6 {
		return netip.MustParsePrefix("::1/128")
	}
	return netip.MustParsePrefix("127.0.0.1/32")
}

func (f Family) inboundPassthrough() netip.Prefix {
	if f == IPv6 {
		return netip.MustParsePrefix("::6/128")
	}
	return netip.MustParsePrefix("127.0.0.6/32")
}

func (f Family) holds(p netip.Prefix) bool { return p.Addr().Is6() == (f == IPv6) }

// dnsServers are the pod's resolvers of family f, as /32 or /128.
func (f Family) dnsServers(c Config) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range c.DNSServers {
		if p := netip.PrefixFrom(a, a.BitLen()); f.holds(p) {
			out = append(out, p)
		}
	}
	return out
}

// capturesDNS says whether the family's rules redirect DNS: DNS capture is
// on and it captures every query or the pod has a resolver of the family.
func (f Family) capturesDNS(c Config) bool {
	return c.RedirectDNS && (c.CaptureAllDNS || len(f.dnsServers(c)) > 0)
}

// Rules is the iptables-restore (IPv4) or ip6tables-restore (IPv6) input
// for c: the nat table's four chains of the package documentation and the
// jumps to them from PREROUTING and OUTPUT. It is meant for
// iptables-restore --noflush: the chains it declares are flushed, the
// others are left alone. Call it with a validated Config.
func Rules(c Config, f Family) string {
	var b strings.Builder
	add := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	add("# nave capture (%s): inbound TCP to %d, outbound TCP to %d, uid/gid %d/%d excluded", f, c.InboundPort, c.OutboundPort, c.ProxyUID, c.ProxyGID)
	dns := f.capturesDNS(c)
	if dns {
		add("# DNS (UDP and TCP port 53) to %d, uid/gid %d/%d excluded", c.DNSPort, c.ProxyUID, c.ProxyGID)
	}
	add("*nat")
	chains := []string{chainInbound, chainInRedirect, chainOutput, chainRedirect}
	if dns {
		chains = append(chains, chainDNS)
	}
	for _, ch := range chains {
		add(":%s - [0:0]", ch)
	}
	add("-A %s -p tcp -j REDIRECT --to-ports %d", chainInRedirect, c.InboundPort)
	add("-A %s -p tcp -j REDIRECT --to-ports %d", chainRedirect, c.OutboundPort)

	// Inbound.
	add("-A PREROUTING -p tcp -j %s", chainInbound)
	for _, p := range c.ExcludeInboundPorts {
		add("-A %s -p tcp --dport %d -j RETURN", chainInbound, p)
	}
	if c.InboundAllPorts {
		add("-A %s -p tcp -j %s", chainInbound, chainInRedirect)
	} else {
		for _, p := range c.InboundPorts {
			add("-A %s -p tcp --dport %d -j %s", chainInbound, p, chainInRedirect)
		}
	}

	// Outbound.
	lo := f.loopback()
	add("-A OUTPUT -p tcp -j %s", chainOutput)
	// Envoy's inbound passthrough to the app.
	add("-A %s -s %s -o lo -j RETURN", chainOutput, f.inboundPassthrough())
	// The proxy calling an address of the pod over loopback: the app
	// called itself through a service or its pod IP and Envoy routed it
	// back; it goes through the inbound side, as Istio's does.
	// Anything else over loopback not from the proxy stays local. With
	// DNS capture, TCP port 53 is neither (as in Istio): the agent's
	// queries go where they were sent, and an app's to a resolver on
	// loopback reach the DNS rules below.
	notDNS := ""
	if dns {
		notDNS = "-p tcp ! --dport 53 "
	}
	for _, owner := range []string{fmt.Sprintf("--uid-owner %d", c.ProxyUID), fmt.Sprintf("--gid-owner %d", c.ProxyGID)} {
		if dns {
			add("-A %s ! -d %s -o lo -p tcp ! --dport 53 -m owner %s -j %s", chainOutput, lo, owner, chainInRedirect)
		} else {
			add("-A %s ! -d %s -o lo -p tcp -m owner %s -j %s", chainOutput, lo, owner, chainInRedirect)
		}
		add("-A %s -o lo %s-m owner ! %s -j RETURN", chainOutput, notDNS, owner)
		add("-A %s -m owner %s -j RETURN", chainOutput, owner)
	}
	if dns {
		// The app's TCP queries (the proxy's returned above).
		add("-A %s -p tcp --dport 53 -j %s", chainOutput, chainDNS)
	}
	add("-A %s -d %s -j RETURN", chainOutput, lo)
	for _, p := range c.ExcludeOutboundPorts {
		add("-A %s -p tcp --dport %d -j RETURN", chainOutput, p)
	}
	for _, r := range c.ExcludeOutboundRanges {
		if f.holds(r) {
			add("-A %s -d %s -j RETURN", chainOutput, r)
		}
	}
	if c.OutboundAllRanges {
		add("-A %s -j %s", chainOutput, chainRedirect)
	} else {
		for _, r := range c.OutboundRanges {
			if f.holds(r) {
				add("-A %s -d %s -j %s", chainOutput, r, chainRedirect)
			}
		}
	}
	if dns {
		dnsRules(c, f, add)
	}
	add("COMMIT")
	if dns {
		ctZones(c, f, add)
	}
	return b.String()
}

// dnsRules are the nat rules of DNS capture: UDP port 53 jumps to the DNS
// chain from OUTPUT (TCP from the outbound chain, above); the proxy's own
// queries go out, the app's to the pod's resolvers (or every one) go to
// the agent's DNS port.
func dnsRules(c Config, f Family, add func(string, ...any)) {
	add("-A OUTPUT -p udp --dport 53 -j %s", chainDNS)
	add("-A %s -m owner --uid-owner %d -j RETURN", chainDNS, c.ProxyUID)
	add("-A %s -m owner --gid-owner %d -j RETURN", chainDNS, c.ProxyGID)
	for _, proto := range []string{"udp", "tcp"} {
		if c.CaptureAllDNS {
			add("-A %s -p %s --dport 53 -j REDIRECT --to-ports %d", chainDNS, proto, c.DNSPort)
			continue
		}
		for _, s := range f.dnsServers(c) {
			add("-A %s -d %s -p %s --dport 53 -j REDIRECT --to-ports %d", chainDNS, s, proto, c.DNSPort)
		}
	}
}

// ctZones is the raw table of DNS capture: the proxy's queries upstream
// and their answers in conntrack zone 1, the app's queries and the
// proxy's answers to them in zone 2 (Istio's zones). The first CT rule a
// packet meets decides.
func ctZones(c Config, f Family, add func(string, ...any)) {
	add("*raw")
	add(":%s - [0:0]", chainDNSCTOut)
	add(":%s - [0:0]", chainDNSCTIn)
	add("-A OUTPUT -p udp -j %s", chainDNSCTOut)
	add("-A PREROUTING -p udp -j %s", chainDNSCTIn)
	for _, owner := range []string{fmt.Sprintf("--uid-owner %d", c.ProxyUID), fmt.Sprintf("--gid-owner %d", c.ProxyGID)} {
		add("-A %s -p udp --dport 53 -m owner %s -j CT --zone 1", chainDNSCTOut, owner)
		add("-A %s -p udp --sport %d -m owner %s -j CT --zone 2", chainDNSCTOut, c.DNSPort, owner)
	}
	if c.CaptureAllDNS {
		add("-A %s -p udp --dport 53 -j CT --zone 2", chainDNSCTOut)
		add("-A %s -p udp --sport 53 -j CT --zone 1", chainDNSCTIn)
	} else {
		for _, s := range f.dnsServers(c) {
			add("-A %s -d %s -p udp --dport 53 -j CT --zone 2", chainDNSCTOut, s)
			add("-A %s -s %s -p udp --sport 53 -j CT --zone 1", chainDNSCTIn, s)
		}
	}
	add("COMMIT")
}
