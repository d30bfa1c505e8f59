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

// Rules is the iptables-restore (IPv4) or ip6tables-restore (IPv6) input
// for c: the nat table's four chains of the package documentation and the
// jumps to them from PREROUTING and OUTPUT. It is meant for
// iptables-restore --noflush: the chains it declares are flushed, the
// others are left alone. Call it with a validated Config.
func Rules(c Config, f Family) string {
	var b strings.Builder
	add := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	add("# nave capture (%s): inbound TCP to %d, outbound TCP to %d, uid/gid %d/%d excluded", f, c.InboundPort, c.OutboundPort, c.ProxyUID, c.ProxyGID)
	add("*nat")
	for _, ch := range []string{chainInbound, chainInRedirect, chainOutput, chainRedirect} {
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
	add("-A %s ! -d %s -o lo -p tcp -m owner --uid-owner %d -j %s", chainOutput, lo, c.ProxyUID, chainInRedirect)
	// Anything else over loopback not from the proxy stays local.
	add("-A %s -o lo -m owner ! --uid-owner %d -j RETURN", chainOutput, c.ProxyUID)
	add("-A %s -m owner --uid-owner %d -j RETURN", chainOutput, c.ProxyUID)
	add("-A %s ! -d %s -o lo -p tcp -m owner --gid-owner %d -j %s", chainOutput, lo, c.ProxyGID, chainInRedirect)
	add("-A %s -o lo -m owner ! --gid-owner %d -j RETURN", chainOutput, c.ProxyGID)
	add("-A %s -m owner --gid-owner %d -j RETURN", chainOutput, c.ProxyGID)
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
	add("COMMIT")
	return b.String()
}
