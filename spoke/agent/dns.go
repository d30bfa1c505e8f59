package agent

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/retry"
	"github.com/navemesh/nave/spoke/agent/dnsproxy"
	"github.com/navemesh/nave/spoke/agentconfig"
)

// dnsAgent is the DNS proxy of a pod whose DNS is captured
// (agentconfig.Config.DNSCapture): the server, the addresses it listens
// on, and, once the bootstrap is known, the stream that feeds it the name
// table.
type dnsAgent struct {
	server *dnsproxy.Server
	addrs  []string
	stream *NameTableStream
}

// newDNSAgent reads the pod's resolv.conf and makes the proxy.
func newDNSAgent(cfg agentconfig.Config, log *slog.Logger, reg prometheus.Registerer) (*dnsAgent, error) {
	o, v6, err := dnsproxy.OptionsFromResolvConf(cfg.DNS.ResolvConf, dnsproxy.Options{
		Scope:   dnsproxy.Scope{Namespace: cfg.Pod.Namespace, DomainSuffix: cfg.DomainSuffix},
		Timeout: cfg.DNS.UpstreamTimeout, Log: log, Registerer: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("dns.resolvConf: %w", err)
	}
	host, port, err := net.SplitHostPort(cfg.DNS.Address)
	if err != nil {
		return nil, fmt.Errorf("dns.address: %w", err)
	}
	addrs := []string{cfg.DNS.Address}
	if host == "localhost" {
		// Istio's rule: the capture redirects an IPv4 query to 127.0.0.1
		// and an IPv6 one to ::1; listen on ::1 when there can be one.
		addrs = []string{net.JoinHostPort("127.0.0.1", port)}
		if v6 {
			addrs = append(addrs, net.JoinHostPort("::1", port))
		}
	}
	if len(o.Upstreams) == 0 {
		log.Warn("dns: the resolver configuration names no nameserver: names not in the name table get SERVFAIL", "file", cfg.DNS.ResolvConf)
	}
	return &dnsAgent{server: dnsproxy.New(o), addrs: addrs}, nil
}

// startDNS binds the proxy's addresses, before the bootstrap is written
// (so before the agent is ready and the app starts), and makes the
// stream that speaks as boot's node.
func (a *Agent) startDNS(boot []byte) error {
	if err := a.dns.server.Listen(a.dns.addrs...); err != nil {
		return err
	}
	node, err := bootstrapNode(boot)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(a.cfg.Trust.HubCA)) {
		return fmt.Errorf("trust.hubCA: no certificate")
	}
	a.dns.stream, err = NewNameTableStream(NameTableOptions{Address: a.cfg.XDS.Address, ServerName: a.cfg.XDS.Host(), Roots: roots,
		Certificate: keeperCertificate(a.keeper), Node: node, Apply: a.dns.server.Update,
		Backoff: retry.Policy{Initial: a.cfg.RA.RetryInitial, Max: a.cfg.RA.RetryMax}, Log: a.log.With("component", "name-table")})
	if err != nil {
		return err
	}
	a.log.Info("dns proxy listening", "addresses", a.dns.server.Addrs(), "upstreams", a.dns.upstreams())
	return nil
}

// runNameTable opens the name table stream once the workload certificate
// is in place, and keeps it until ctx ends.
func (a *Agent) runNameTable(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-a.keeper.Ready():
	}
	return a.dns.stream.Run(ctx)
}

func (d *dnsAgent) upstreams() []string { return d.server.Options().Upstreams }

// dnsView is /debug/dns.
func (a *Agent) dnsView(*http.Request) (any, error) {
	type tableView struct {
		Version  string              `json:"version"`
		Received time.Time           `json:"received"`
		Hosts    int                 `json:"hosts"`
		Names    int                 `json:"names"`
		Entries  []dnsproxy.HostView `json:"entries"`
	}
	type view struct {
		Listening []string             `json:"listening"`
		Upstreams []string             `json:"upstreams"`
		Search    []string             `json:"search,omitempty"`
		Queries   map[string]uint64    `json:"queries"`
		Stream    *NameTableStreamView `json:"stream,omitempty"`
		Table     *tableView           `json:"table"`
	}
	o := a.dns.server.Options()
	v := view{Listening: a.dns.server.Addrs(), Upstreams: o.Upstreams, Search: o.Scope.Search, Queries: a.dns.server.Counts()}
	if a.dns.stream != nil {
		sv := a.dns.stream.View()
		v.Stream = &sv
	}
	if t := a.dns.server.Table(); t != nil {
		v.Table = &tableView{Version: t.Version, Received: t.Received, Hosts: t.Hosts, Names: t.Names(), Entries: t.View()}
	}
	return v, nil
}
