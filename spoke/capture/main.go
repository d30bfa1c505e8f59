package capture

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"github.com/miekg/dns"
)

// Main is `nave-agent capture FLAGS`: it installs the rules of the flags
// (see Config.Args) in the current network namespace with
// iptables-restore, and with ip6tables-restore when the pod has an IPv6
// address (--ipv6=auto) or --ipv6=true. --dry-run prints the rules
// instead. Without any flag it refuses (it would rewrite the nat table of
// wherever it runs). It returns the process's exit code: 0 done, 1
// failed, 2 bad flags.
func Main(args []string) int { return run(args, os.Stdout, os.Stderr) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		// Every real use names its flags (the injector's nave-init container
		// does); a bare run is someone trying the command, and would rewrite the
		// nat table of whatever network namespace it runs in — a host's too.
		fmt.Fprintln(stderr, "nave-agent capture: no flags given: it rewrites this network namespace's nat table, so it runs only with the flags the injected nave-init container passes (docs/injection.md); add --dry-run to see the rules, --help for the flags")
		return 2
	}
	c := Default()
	fs := flag.NewFlagSet("nave-agent capture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs)
	ipv6 := fs.String(flagIPv6, "auto", "also capture IPv6: auto (when an interface has a global IPv6 address), true or false")
	dryRun := fs.Bool(flagDryRun, false, "print the iptables-restore input instead of applying it")
	restore4 := fs.String(flagIptablesRestore, "iptables-restore", "the iptables-restore program")
	restore6 := fs.String(flagIp6tablesRestore, "ip6tables-restore", "the ip6tables-restore program")
	resolvConf := fs.String(flagResolvConf, "/etc/resolv.conf", "with --redirect-dns and neither --capture-all-dns nor --dns-servers: the file naming the pod's resolvers")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "nave-agent capture: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "nave-agent capture: %v\n", err)
		return 2
	}
	if c.RedirectDNS && !c.CaptureAllDNS && len(c.DNSServers) == 0 {
		servers, err := resolvers(*resolvConf)
		if err != nil || len(servers) == 0 {
			// Istio's rule: no resolver to capture, no DNS capture; the
			// rest of the capture stands.
			fmt.Fprintf(stderr, "nave-agent capture: --redirect-dns: no nameserver in %s (%v): DNS is not captured\n", *resolvConf, err)
			c.RedirectDNS = false
		}
		c.DNSServers = servers
	}
	families := []Family{IPv4}
	switch *ipv6 {
	case "true":
		families = append(families, IPv6)
	case "false":
	case "auto":
		if hasGlobalIPv6() {
			families = append(families, IPv6)
		}
	default:
		fmt.Fprintf(stderr, "nave-agent capture: --ipv6 %q: want auto, true or false\n", *ipv6)
		return 2
	}
	for _, f := range families {
		rules := Rules(c, f)
		if *dryRun {
			fmt.Fprint(stdout, rules)
			continue
		}
		prog := *restore4
		if f == IPv6 {
			prog = *restore6
		}
		if err := apply(prog, rules); err != nil {
			fmt.Fprintf(stderr, "nave-agent capture: %s rules: %v\n", f, err)
			return 1
		}
		fmt.Fprintf(stdout, "nave-agent capture: %s rules installed (%d lines)\n", f, strings.Count(rules, "\n"))
	}
	return 0
}

// resolvers are the nameservers of a resolv.conf file.
func resolvers(path string) ([]netip.Addr, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, err
	}
	return ParseAddrs(strings.Join(cc.Servers, ","))
}

// apply feeds rules to prog --noflush (atomic: all or nothing).
func apply(prog, rules string) error {
	cmd := exec.Command(prog, "--noflush")
	cmd.Stdin = strings.NewReader(rules)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s --noflush: %w: %s", prog, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// hasGlobalIPv6 reports whether an interface has a global unicast IPv6
// address: then the pod can talk IPv6 and its IPv6 traffic is captured
// too.
func hasGlobalIPv6() bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() == nil && n.IP.IsGlobalUnicast() {
			return true
		}
	}
	return false
}
