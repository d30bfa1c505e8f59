package capture

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Defaults of a Config, Istio's numbers.
const (
	DefaultProxyUID     = 1337
	DefaultInboundPort  = 15006
	DefaultOutboundPort = 15001
	// DefaultDNSPort is where the agent answers DNS (dnsproxy.Port).
	DefaultDNSPort = 15053
)

// All, as a port list or a CIDR list, means every port or every address.
const All = "*"

// Config is what a pod's capture redirects and what it leaves alone. A
// plain value.
type Config struct {
	// ProxyUID and ProxyGID own the proxy's traffic, never redirected.
	ProxyUID, ProxyGID int
	// InboundPort and OutboundPort are Envoy's capture listeners.
	InboundPort, OutboundPort int
	// InboundAllPorts redirects every inbound port but the excluded ones;
	// otherwise only InboundPorts are.
	InboundAllPorts bool
	InboundPorts    []int
	// ExcludeInboundPorts are never redirected inbound.
	ExcludeInboundPorts []int
	// ExcludeOutboundPorts are destination ports never redirected.
	ExcludeOutboundPorts []int
	// OutboundAllRanges redirects every destination but the excluded
	// ones; otherwise only those in OutboundRanges are.
	OutboundAllRanges bool
	OutboundRanges    []netip.Prefix
	// ExcludeOutboundRanges are destinations never redirected.
	ExcludeOutboundRanges []netip.Prefix
	// RedirectDNS sends the pod's DNS queries (UDP and TCP port 53) to
	// the agent's DNS proxy on DNSPort, but for the proxy's own (its
	// queries upstream): Istio's --redirect-dns, on with proxyMetadata
	// ISTIO_META_DNS_CAPTURE. Only queries to DNSServers are redirected
	// (the pod's resolvers: a DNS server the app runs or calls by its
	// own address is left alone), or every query with CaptureAllDNS.
	RedirectDNS   bool
	CaptureAllDNS bool
	DNSServers    []netip.Addr
	DNSPort       int
}

// Default is Istio's default capture: every inbound port to 15006, every
// outbound destination to 15001, uid and gid 1337 excluded.
func Default() Config {
	return Config{ProxyUID: DefaultProxyUID, ProxyGID: DefaultProxyUID, InboundPort: DefaultInboundPort,
		OutboundPort: DefaultOutboundPort, InboundAllPorts: true, OutboundAllRanges: true, DNSPort: DefaultDNSPort}
}

// ParseAddrs parses a comma-separated list of IP addresses ("10.96.0.10,
// fd00::a"); they come back unmapped, sorted, without duplicates.
func ParseAddrs(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		a, err := netip.ParseAddr(item)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is not an IP address", clip(item))
		}
		out = append(out, a.Unmap())
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

// ParsePorts parses a comma-separated list of TCP ports ("15020, 8080"),
// as Istio's traffic.sidecar.istio.io/*Ports annotations hold them; white
// space and empty items are ignored. The list comes back sorted, without
// duplicates.
func ParsePorts(s string) ([]int, error) {
	var out []int
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, err := strconv.Atoi(item)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%q is not a port (1-65535)", clip(item))
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ParseRanges parses a comma-separated list of CIDRs ("10.0.0.0/8,
// fd00::/8"); a bare address is a /32 or /128. The prefixes come back
// masked, sorted, without duplicates.
func ParseRanges(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var p netip.Prefix
		var err error
		if strings.Contains(item, "/") {
			p, err = netip.ParsePrefix(item)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(item); err == nil && a.Zone() == "" {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil || !p.IsValid() || p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8 or fd00::/8)", clip(item))
		}
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out), nil
}

// clip bounds what an error quotes of a flag value: 40 characters.
func clip(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}

// Validate checks the ports and the uid.
func (c *Config) Validate() error {
	if c.ProxyUID < 0 || c.ProxyGID < 0 {
		return errors.New("proxy uid and gid must not be negative")
	}
	for _, p := range []int{c.InboundPort, c.OutboundPort, c.DNSPort} {
		if p < 1 || p > 65535 {
			return fmt.Errorf("capture port %d is not a port (1-65535)", p)
		}
	}
	if c.InboundPort == c.OutboundPort {
		return fmt.Errorf("inbound and outbound capture ports are both %d", c.InboundPort)
	}
	if c.DNSPort == c.InboundPort || c.DNSPort == c.OutboundPort {
		return fmt.Errorf("the DNS port %d is also a TCP capture port", c.DNSPort)
	}
	for _, l := range [][]int{c.InboundPorts, c.ExcludeInboundPorts, c.ExcludeOutboundPorts} {
		for _, p := range l {
			if p < 1 || p > 65535 {
				return fmt.Errorf("%d is not a port (1-65535)", p)
			}
		}
	}
	return nil
}

// Flag names of Args and Main.
const (
	flagProxyUID         = "proxy-uid"
	flagProxyGID         = "proxy-gid"
	flagInboundPort      = "inbound-port"
	flagOutboundPort     = "outbound-port"
	flagInboundPorts     = "include-inbound-ports"
	flagExcludeInbound   = "exclude-inbound-ports"
	flagExcludeOutbound  = "exclude-outbound-ports"
	flagOutboundRanges   = "include-outbound-ranges"
	flagExcludeRanges    = "exclude-outbound-ranges"
	flagRedirectDNS      = "redirect-dns"
	flagCaptureAllDNS    = "capture-all-dns"
	flagDNSServers       = "dns-servers"
	flagDNSPort          = "dns-port"
	flagResolvConf       = "resolv-conf"
	flagIPv6             = "ipv6"
	flagDryRun           = "dry-run"
	flagIptablesRestore  = "iptables-restore"
	flagIp6tablesRestore = "ip6tables-restore"
)

// Args are the command-line flags that give Main this Config.
func (c *Config) Args() []string {
	in := All
	if !c.InboundAllPorts {
		in = joinPorts(c.InboundPorts)
	}
	out := All
	if !c.OutboundAllRanges {
		out = joinRanges(c.OutboundRanges)
	}
	args := []string{
		"--" + flagProxyUID + "=" + strconv.Itoa(c.ProxyUID),
		"--" + flagProxyGID + "=" + strconv.Itoa(c.ProxyGID),
		"--" + flagInboundPort + "=" + strconv.Itoa(c.InboundPort),
		"--" + flagOutboundPort + "=" + strconv.Itoa(c.OutboundPort),
		"--" + flagInboundPorts + "=" + in,
		"--" + flagOutboundRanges + "=" + out,
	}
	if len(c.ExcludeInboundPorts) > 0 {
		args = append(args, "--"+flagExcludeInbound+"="+joinPorts(c.ExcludeInboundPorts))
	}
	if len(c.ExcludeOutboundPorts) > 0 {
		args = append(args, "--"+flagExcludeOutbound+"="+joinPorts(c.ExcludeOutboundPorts))
	}
	if len(c.ExcludeOutboundRanges) > 0 {
		args = append(args, "--"+flagExcludeRanges+"="+joinRanges(c.ExcludeOutboundRanges))
	}
	if c.RedirectDNS {
		args = append(args, "--"+flagRedirectDNS)
		if c.CaptureAllDNS {
			args = append(args, "--"+flagCaptureAllDNS)
		}
		if len(c.DNSServers) > 0 {
			args = append(args, "--"+flagDNSServers+"="+joinAddrs(c.DNSServers))
		}
		if c.DNSPort != DefaultDNSPort {
			args = append(args, "--"+flagDNSPort+"="+strconv.Itoa(c.DNSPort))
		}
	}
	return args
}

func joinPorts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func joinRanges(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// portsValue is a flag holding "*" or a port list.
type portsValue struct {
	all   *bool
	ports *[]int
}

func (v portsValue) String() string {
	if v.all == nil {
		return ""
	}
	if *v.all {
		return All
	}
	return joinPorts(*v.ports)
}

func (v portsValue) Set(s string) error {
	if strings.TrimSpace(s) == All {
		*v.all, *v.ports = true, nil
		return nil
	}
	ps, err := ParsePorts(s)
	if err != nil {
		return err
	}
	*v.all, *v.ports = false, ps
	return nil
}

// rangesValue is a flag holding "*" or a CIDR list.
type rangesValue struct {
	all    *bool
	ranges *[]netip.Prefix
}

func (v rangesValue) String() string {
	if v.all == nil {
		return ""
	}
	if *v.all {
		return All
	}
	return joinRanges(*v.ranges)
}

func (v rangesValue) Set(s string) error {
	if strings.TrimSpace(s) == All {
		*v.all, *v.ranges = true, nil
		return nil
	}
	rs, err := ParseRanges(s)
	if err != nil {
		return err
	}
	*v.all, *v.ranges = false, rs
	return nil
}

// listFlag is a flag holding a list ("*" refused): ports, CIDRs or
// addresses, parsed and printed by the package's functions.
type listFlag[T any] struct {
	list  *[]T
	parse func(string) ([]T, error)
	join  func([]T) string
}

func (v listFlag[T]) String() string {
	if v.list == nil {
		return ""
	}
	return v.join(*v.list)
}

func (v listFlag[T]) Set(s string) (err error) { *v.list, err = v.parse(s); return err }

func onlyPorts(l *[]int) listFlag[int] { return listFlag[int]{l, ParsePorts, joinPorts} }

func onlyRanges(l *[]netip.Prefix) listFlag[netip.Prefix] {
	return listFlag[netip.Prefix]{l, ParseRanges, joinRanges}
}

func onlyAddrs(l *[]netip.Addr) listFlag[netip.Addr] {
	return listFlag[netip.Addr]{l, ParseAddrs, joinAddrs}
}

// flags binds c's fields to fs.
func (c *Config) flags(fs *flag.FlagSet) {
	fs.IntVar(&c.ProxyUID, flagProxyUID, c.ProxyUID, "uid of the proxy, whose traffic is never redirected")
	fs.IntVar(&c.ProxyGID, flagProxyGID, c.ProxyGID, "gid of the proxy, whose traffic is never redirected")
	fs.IntVar(&c.InboundPort, flagInboundPort, c.InboundPort, "port inbound TCP is redirected to")
	fs.IntVar(&c.OutboundPort, flagOutboundPort, c.OutboundPort, "port outbound TCP is redirected to")
	fs.Var(portsValue{&c.InboundAllPorts, &c.InboundPorts}, flagInboundPorts, `inbound ports redirected: "*" (all) or a comma-separated list`)
	fs.Var(onlyPorts(&c.ExcludeInboundPorts), flagExcludeInbound, "inbound ports never redirected, comma-separated")
	fs.Var(onlyPorts(&c.ExcludeOutboundPorts), flagExcludeOutbound, "outbound destination ports never redirected, comma-separated")
	fs.Var(rangesValue{&c.OutboundAllRanges, &c.OutboundRanges}, flagOutboundRanges, `outbound destinations redirected: "*" (all) or comma-separated CIDRs`)
	fs.Var(onlyRanges(&c.ExcludeOutboundRanges), flagExcludeRanges, "outbound destinations never redirected, comma-separated CIDRs")
	fs.BoolVar(&c.RedirectDNS, flagRedirectDNS, c.RedirectDNS, "redirect DNS queries (UDP and TCP port 53) to the agent's DNS proxy on --dns-port, but the proxy's own")
	fs.BoolVar(&c.CaptureAllDNS, flagCaptureAllDNS, c.CaptureAllDNS, "with --redirect-dns: every DNS query, whatever its server; otherwise only those to the pod's resolvers")
	fs.Var(onlyAddrs(&c.DNSServers), flagDNSServers, "with --redirect-dns: the pod's resolvers, comma-separated (default: the nameservers of --resolv-conf)")
	fs.IntVar(&c.DNSPort, flagDNSPort, c.DNSPort, "port of the agent's DNS proxy (UDP and TCP)")
}

// ParseArgs parses flags as Config.Args writes them (Main's flags but
// those of how to apply) into a validated Config.
func ParseArgs(args []string) (Config, error) {
	c := Default()
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.flags(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", clip(fs.Arg(0)))
	}
	return c, c.Validate()
}
